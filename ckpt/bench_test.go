package ckpt

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkReceive stores 256 chunks of 512 KiB one by one, as a receiver
// does, paced at 120 MB/s (a 1 Gbit/s link), then commits them. It reports
// the commit's time (what a sender waits for after its last chunk) and the
// process's CPU seconds per GB (fsyncs in the background workers count;
// the kernel's own writeback threads do not). It writes to the real disk
// under b.TempDir().
func BenchmarkReceive(b *testing.B) {
	const n, size, rate = 256, 512 << 10, 120e6
	chunks := make([][]byte, n)
	for i := range chunks {
		chunks[i] = randBytes(uint64(1000+i), size)
	}
	var commit time.Duration
	var cpu float64
	for b.Loop() {
		b.StopTimer()
		s, err := Open(Config{Root: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		m := &Manifest{JobID: "j", Version: 1, Created: time.Unix(0, 0).UTC()}
		f := File{Path: "model.pt", Mode: 0o644}
		for _, c := range chunks {
			f.Chunks = append(f.Chunks, ChunkRef{Hash: Sum(c), Size: int64(len(c))})
			f.Size += int64(len(c))
		}
		m.Files = []File{f}
		if err := s.BeginPending(m); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu0, t0 := cpuSeconds(), time.Now()
		for i, c := range chunks {
			if err := s.PutChunk(f.Chunks[i].Hash, c); err != nil {
				b.Fatal(err)
			}
			if ahead := time.Duration(float64((i+1)*size)/rate*1e9) - time.Since(t0); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		tc := time.Now()
		if err := s.Commit(m); err != nil {
			b.Fatal(err)
		}
		commit += time.Since(tc)
		cpu += cpuSeconds() - cpu0
	}
	b.SetBytes(n * size)
	b.ReportMetric(float64(commit.Milliseconds())/float64(b.N), "commit-ms/op")
	b.ReportMetric(cpu/float64(b.N)/(n*size/1e9), "cpu-s/GB")
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkAddDir chunks, stores and commits a 128 MiB file (what a
// checkpoint save costs the node).
func BenchmarkAddDir(b *testing.B) {
	src := b.TempDir()
	writeTreeB(b, src, "model.pt", randBytes(7, 128<<20))
	v := uint64(0)
	for b.Loop() {
		b.StopTimer()
		s, err := Open(Config{Root: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		v++
		b.StartTimer()
		if _, err := s.AddDir("j", v, src, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(128 << 20)
}

func writeTreeB(b *testing.B, dir, name string, data []byte) {
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		b.Fatal(err)
	}
}
