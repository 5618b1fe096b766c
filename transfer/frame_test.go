package transfer

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/policy"
)

func sampleManifest() *ckpt.Manifest {
	d := []byte("hello world")
	return &ckpt.Manifest{JobID: "j", Version: 3, Files: []ckpt.File{{Path: "a", Size: int64(len(d)), Mode: 0o644, Hash: ckpt.Sum(d), Chunks: []ckpt.ChunkRef{{Hash: ckpt.Sum(d), Size: int64(len(d))}}}}}
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	m := sampleManifest()
	writeFrame(&buf, frameOffer, encodeOffer(policy.ClassPresync, m))
	writeFrame(&buf, frameNeed, encodeHashes([]ckpt.Hash{ckpt.Sum([]byte("x")), ckpt.Sum([]byte("y"))}))
	writeFrame(&buf, frameFail, encodeFail(failQuota, "no room"))
	raw := []byte("chunk bytes")
	writeFrame(&buf, frameChunk, append(appendChunkHeader(nil, ckpt.Sum(raw), len(raw), encRaw), raw...))

	f, err := readFrame(&buf, maxControlFrame)
	if err != nil || f.typ != frameOffer {
		t.Fatalf("frame 1: got %v %v, want OFFER", f.typ, err)
	}
	off, err := parseOffer(f.payload)
	if err != nil || off.class != policy.ClassPresync || off.manifest.Hash() != m.Hash() {
		t.Fatalf("offer: got class %v err %v", off.class, err)
	}
	f, _ = readFrame(&buf, maxControlFrame)
	hs, err := parseHashes(f.payload)
	if err != nil || len(hs) != 2 || hs[1] != ckpt.Sum([]byte("y")) {
		t.Fatalf("need: got %v %v", hs, err)
	}
	f, _ = readFrame(&buf, maxControlFrame)
	fl, err := parseFail(f.payload)
	if err != nil || fl.code != failQuota || fl.msg != "no room" {
		t.Fatalf("fail: got %+v %v", fl, err)
	}
	f, _ = readFrame(&buf, maxChunkFrame)
	c, err := parseChunk(f.payload)
	if err != nil || c.hash != ckpt.Sum(raw) || !bytes.Equal(c.data, raw) {
		t.Fatalf("chunk: got %+v %v", c, err)
	}
	if _, err := readFrame(&buf, maxControlFrame); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: got %v, want EOF", err)
	}
}

func TestFrameRejects(t *testing.T) {
	big := appendFrameHeader(nil, frameNeed, maxControlFrame+1)
	if _, err := readFrame(bytes.NewReader(big), maxControlFrame); !errors.Is(err, ErrProtocol) {
		t.Errorf("oversized frame: got %v, want ErrProtocol", err)
	}
	short := append(appendFrameHeader(nil, frameNeed, 64), make([]byte, 10)...)
	if _, err := readFrame(bytes.NewReader(short), maxControlFrame); !errors.Is(err, ErrProtocol) {
		t.Errorf("truncated frame: got %v, want ErrProtocol", err)
	}
	if _, err := parseHashes(make([]byte, 33)); !errors.Is(err, ErrProtocol) {
		t.Errorf("ragged hash list: got %v, want ErrProtocol", err)
	}
	bad := encodeOffer(policy.ClassMigration, sampleManifest())
	bad[0] = 9
	if _, err := parseOffer(bad); !errors.Is(err, ErrProtocol) {
		t.Errorf("unknown protocol version: got %v, want ErrProtocol", err)
	}
	bad = encodeOffer(policy.TrafficClass(200), sampleManifest())
	if _, err := parseOffer(bad); !errors.Is(err, ErrProtocol) {
		t.Errorf("unknown class: got %v, want ErrProtocol", err)
	}
	raw := []byte("abc")
	c := append(appendChunkHeader(nil, ckpt.Sum(raw), 4, encRaw), raw...)
	if _, err := parseChunk(c); !errors.Is(err, ErrProtocol) {
		t.Errorf("raw chunk with wrong size: got %v, want ErrProtocol", err)
	}
}

// FuzzFrameDecoder feeds arbitrary bytes to the frame reader and every
// payload parser, as a peer could, and checks that accepted chunks decode
// only to bytes of the claimed size.
func FuzzFrameDecoder(f *testing.F) {
	var seed bytes.Buffer
	writeFrame(&seed, frameOffer, encodeOffer(policy.ClassMigration, sampleManifest()))
	f.Add(seed.Bytes())
	seed.Reset()
	writeFrame(&seed, frameNeed, encodeHashes([]ckpt.Hash{ckpt.Sum(nil)}))
	writeFrame(&seed, frameDone, make([]byte, 32))
	f.Add(seed.Bytes())
	cd, err := newCodec(1)
	if err != nil {
		f.Fatal(err)
	}
	defer cd.Close()
	raw := fp32Bytes(1, 8192)
	enc, payload := cd.encode(CompressAuto, raw, nil, &chooser{})
	seed.Reset()
	writeFrame(&seed, frameChunk, append(appendChunkHeader(nil, ckpt.Sum(raw), len(raw), enc), payload...))
	f.Add(seed.Bytes())
	seed.Reset()
	writeFrame(&seed, frameFail, encodeFail(failDiskFull, "full"))
	f.Add(seed.Bytes())
	f.Add([]byte{5, 0, 0, 0, 40})

	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for {
			fr, err := readFrame(r, 1<<20)
			if err != nil {
				return
			}
			switch fr.typ {
			case frameOffer:
				if o, err := parseOffer(fr.payload); err == nil && o.manifest.Validate() != nil {
					t.Fatal("accepted an invalid manifest")
				}
			case frameNeed:
				parseHashes(fr.payload)
			case frameFail:
				parseFail(fr.payload)
			case frameChunk:
				c, err := parseChunk(fr.payload)
				if err != nil {
					continue
				}
				out, err := cd.decode(c.enc, c.data, c.rawSize)
				if err == nil && len(out) != c.rawSize {
					t.Fatalf("decoded %d bytes, header says %d", len(out), c.rawSize)
				}
			}
		}
	})
}

func TestShuffleRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 3, 4, 5, 1023, 4096} {
		src := randomBytes(uint64(n), n+8)[:n]
		sh, back := make([]byte, n), make([]byte, n)
		shuffle4(sh, src)
		unshuffle4(back, sh)
		if !bytes.Equal(back, src) {
			t.Fatalf("n=%d: unshuffle(shuffle(x)) != x", n)
		}
		if n >= 8 && bytes.Equal(sh, src) {
			t.Fatalf("n=%d: shuffle changed nothing", n)
		}
	}
}

func TestCodecChoosesEncoding(t *testing.T) {
	cd, err := newCodec(2)
	if err != nil {
		t.Fatal(err)
	}
	defer cd.Close()
	cases := []struct {
		name string
		data []byte
		mode Compression
		want uint8
	}{
		{"fp32 auto", fp32Bytes(2, 1<<20), CompressAuto, encShuffle},
		// zstd fastest alone barely dents fp32: sent raw.
		{"fp32 zstd only", fp32Bytes(2, 1<<20), CompressZstd, encRaw},
		{"random", randomBytes(3, 1<<20), CompressAuto, encRaw},
		{"text", bytes.Repeat([]byte("step=1 loss=0.25\n"), 60000), CompressAuto, encZstd},
		{"off", bytes.Repeat([]byte("a"), 1<<20), CompressOff, encRaw},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			enc, payload := cd.encode(tc.mode, tc.data, nil, &chooser{})
			if enc != tc.want {
				t.Fatalf("encoding: got %d, want %d", enc, tc.want)
			}
			if enc != encRaw && len(payload) >= len(tc.data) {
				t.Fatalf("compressed %d bytes to %d", len(tc.data), len(payload))
			}
			out, err := cd.decode(enc, payload, len(tc.data))
			if err != nil || !bytes.Equal(out, tc.data) {
				t.Fatalf("decode: err %v, equal %v", err, bytes.Equal(out, tc.data))
			}
		})
	}
	// fp32: the shuffle makes it worth compressing.
	d := fp32Bytes(4, 1<<20)
	_, sh := cd.encode(CompressAuto, d, nil, &chooser{})
	if len(sh) > len(d)*95/100 {
		t.Errorf("fp32 shuffled: %d of %d bytes, want <= 95%%", len(sh), len(d))
	}
}

func TestProbeBacksOffOnIncompressibleData(t *testing.T) {
	cd, err := newCodec(1)
	if err != nil {
		t.Fatal(err)
	}
	defer cd.Close()
	ch := &chooser{}
	probes, last := 0, int64(0)
	for i := 0; i < 1000; i++ {
		if enc, _ := cd.encode(CompressAuto, randomBytes(uint64(100+i), 4096), nil, ch); enc != encRaw {
			t.Fatalf("random chunk %d: encoding %d, want raw", i, enc)
		}
		if next := ch.nextProbe.Load(); next != last {
			probes, last = probes+1, next
		}
	}
	// 16, 32, 64, then every 64: about 19 probes; without the back-off 63.
	if probes < 10 || probes > 25 {
		t.Fatalf("probes over 1000 random chunks: got %d, want 10..25", probes)
	}
	// Data that turns compressible is compressed again within maxProbeEvery
	// chunks.
	text := bytes.Repeat([]byte("step=1 loss=0.25\n"), 300)
	for i := 1; ; i++ {
		enc, _ := cd.encode(CompressAuto, text, nil, ch)
		if enc == encZstd {
			break
		}
		if i > maxProbeEvery {
			t.Fatalf("compressible chunks still sent raw after %d chunks", i)
		}
	}
}

func TestFetchFrame(t *testing.T) {
	for _, ck := range []bool{false, true} {
		r, err := parseFetch(encodeFetch("job-1", ck))
		if err != nil || r.job != "job-1" || r.checkpoint != ck {
			t.Errorf("round trip (checkpoint %v): %+v %v", ck, r, err)
		}
	}
	for name, p := range map[string][]byte{
		"empty":         {},
		"no job":        {protoVersion, 0},
		"version":       append([]byte{9, 0}, "j"...),
		"unknown flags": append([]byte{protoVersion, 2}, "j"...),
		"bad job id":    append([]byte{protoVersion, 0}, "../x"...),
	} {
		if _, err := parseFetch(p); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", name, err)
		}
	}
}

func FuzzParseFetch(f *testing.F) {
	f.Add(encodeFetch("job", true))
	f.Add([]byte{protoVersion, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := parseFetch(p)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error does not wrap ErrProtocol: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeFetch(r.job, r.checkpoint), p) {
			t.Fatalf("accepted %q, which does not encode back", p)
		}
	})
}
