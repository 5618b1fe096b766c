package raft

import (
	"testing"
	"time"

	"github.com/reclaimnet/reclaimnet/internal/wait"
)

// BenchmarkReelection measures, on a 3-node loopback cluster with mutual
// TLS, the time from a leader's crash to a new leader running its control
// loop (ms/election) and to that leader's first policy tick
// (ms/first-tick). "consul-default" uses hashicorp/raft's default timings
// (1 s heartbeat and election timeouts, 500 ms lease: what Consul and Nomad
// ship); "local" uses DefaultLocalConfig's 50 ms ones. Run:
//
//	go test ./raft -run '^$' -bench Reelection -benchtime 10x
func BenchmarkReelection(b *testing.B) {
	def := DefaultLocalConfig()
	def.HeartbeatTimeout, def.ElectionTimeout, def.LeaderLeaseTimeout, def.CommitTimeout =
		DefaultConfig().HeartbeatTimeout, DefaultConfig().ElectionTimeout, DefaultConfig().LeaderLeaseTimeout, DefaultConfig().CommitTimeout
	for _, bc := range []struct {
		name string
		cfg  Config
	}{{"consul-default", def}, {"local", DefaultLocalConfig()}} {
		b.Run(bc.name, func(b *testing.B) {
			var election, firstTick time.Duration
			for b.Loop() {
				b.StopTimer()
				tc := newTestCluster(b, 3, bc.cfg, false)
				old := tc.waitConfigured(3, 60*time.Second)
				b.StartTimer()
				tc.crash(old.ID())
				start := time.Now()
				l := tc.leader(60 * time.Second)
				election += time.Since(start)
				wait.For(tc.t, 60*time.Second, "a tick on the new leader", func() bool { return l.Ticks() > 0 })
				firstTick += time.Since(start)
				b.StopTimer()
				tc.shutdownAll()
				b.StartTimer()
			}
			b.ReportMetric(float64(election.Milliseconds())/float64(b.N), "ms/election")
			b.ReportMetric(float64(firstTick.Milliseconds())/float64(b.N), "ms/first-tick")
		})
	}
}
