// Package transfer moves checkpoints between nodes over QUIC (quic-go) with
// mutual TLS 1.3 (certificates from package pki): only the chunks the receiver
// lacks are sent, compressed with zstd, each verified by its SHA-256 before it
// is accepted, and a version is committed atomically at the receiver only when
// every chunk is present. The manifest and chunk types and the chunk store are
// package ckpt's.
//
// # Roles and sockets
//
// A [Server] listens on the node's fixed transfer port (7948 by default) and
// receives. A [Client] sends: every transfer dials from its OWN UDP socket
// (an ephemeral port, reported by [Transfer.LocalPort] before any packet is
// sent) so that the kernel layer can key a per-flow ceiling and DSCP mark on
// the source port, and so that a kill-switch on the listening port never
// blocks this node's own outgoing evacuation. A retry after a broken
// connection reuses the transfer's socket, so its flow key stays the same.
//
// # Wire protocol, version 1 (ALPN "reclaimnet-transfer/1")
//
// Every message is a frame:
//
//	frame   = type:u8 length:u32be payload[length]
//	OFFER   (0x01) proto:u8(=1) class:u8 manifest        sender → receiver, control stream
//	NEED    (0x02) hash[32]*                             receiver → sender, control stream
//	DONE    (0x03) manifest-hash[32]                     receiver → sender, control stream
//	FAIL    (0x04) code:u8 message(utf-8)                either way, control stream
//	CHUNK   (0x05) hash[32] rawsize:u32be enc:u8 data    sender → receiver, data streams
//	FETCH   (0x06) proto:u8(=1) flags:u8 job-id          requester → holder, control stream
//	MANIFEST(0x07) manifest                              holder → requester, control stream
//
// The sender opens one bidirectional control stream and sends OFFER: the
// protocol version, the traffic class (policy.TrafficClass) and the canonical
// manifest (ckpt.Manifest.Encode). The receiver validates it, records the
// version as pending (its chunks are pinned, and survive a restart), and
// answers NEED with the hashes of the chunks it does not hold: this is the
// "have" exchange, so a background pre-sync leaves the final hand-off a small
// delta, and a resumed transfer sends only the rest. The sender then sends the
// needed chunks as CHUNK frames over up to Config.Streams unidirectional data
// streams in parallel. enc is 0 (raw), 1 (zstd) or 2 (zstd of the 4-byte
// byte-plane shuffle of the data, which helps float32 tensors). Chunks are
// compressed at zstd's fastest level in parallel (one worker per stream).
// One chunk in 16 is probed (compressed plain and shuffled); the chunks
// after it use the winner, and a chunk that does not shrink below 97 % is
// sent raw and triggers a new probe.
//
// The receiver decodes each CHUNK, checks that the data hashes to the claimed
// hash and that the hash is one the manifest names, and only then stores it.
// A chunk that fails is asked for again with another NEED (up to
// maxChunkRetries times). When every chunk is present the receiver commits the
// version atomically (ckpt.Store.Commit) and sends DONE with the manifest hash;
// the sender returns success only after DONE. FAIL carries a reason
// (refused, quota, disk full, bad request, too many corrupt chunks); on disk
// full or cancel the receiver removes the partial data and commits nothing.
// A connection that breaks (timeout, reset) leaves the pending version in
// place; the sender retries (Config.Attempts) and the new NEED lists only what
// is still missing.
//
// # Fetch
//
// A fetch ([Client.Fetch]) pulls a job's outputs (flag 1: and its
// checkpoint files) from a holder. The requester opens the control stream
// with FETCH; the holder asks Hooks.AuthorizeFetch (none: refused) and
// answers MANIFEST with its newest version of the job, or FAIL (unknown
// job, purged, refused). The requester answers NEED with the chunks of the
// parts it asked for that its staging directory lacks (the holder refuses
// any other chunk), the holder sends them as CHUNK frames on data streams
// it opens, the requester verifies and stages each, asks again for a
// corrupt one with NEED, and sends DONE with the manifest hash when it
// holds them all. A broken connection is retried and asks only for the
// rest; the files are renamed into the destination only when complete.
// The two halves are separable: [Client.FetchChunks] runs the connections
// into any [ChunkStore], and [Stage] is the receiving end (the staging
// store, then the files placed), so the agent can relay the chunks to
// 'reclaimnet fetch', which writes the files as its caller.
//
// # Limits, concurrent connections and stale versions
//
// A receiver grants each connection one bidirectional (control) stream and
// Config.Streams data streams (QUIC stream limits: a further open is refused
// by the sender's own QUIC stack). A sender configured for more streams
// opens each data stream before it takes a chunk, so its extra workers wait
// holding nothing and the granted streams carry every chunk.
//
// Connections receiving the same (job, version) at once (a resume that
// arrives before the receiver noticed the old connection broke, or two
// senders) share it: the second is asked only for what is still missing, an
// abort (cancel, disk full) on one removes nothing while another still
// receives the version, and an offer of a different manifest under the same
// (job, version) while one is in progress is refused.
//
// A pending version that no connection holds and that saw no activity for
// Config.PendingMaxAge (default one hour, by the store's clock; counted from
// the last connection's end, or from the receiver's start for versions found
// on disk) is removed with its partial data: a sender that never returns
// leaves nothing behind for long.
//
// # Pacing
//
// The sender holds an assigned rate in bytes per second ([Transfer.SetRate],
// changeable during the transfer) with a token bucket (golang.org/x/time/rate):
// it waits for tokens before each write of at most pieceSize bytes, with a
// burst of a few pieces, so every 1 s window stays within a few percent of the
// rate. The QUIC flow-control windows are 8/32 MiB per stream and 16/64 MiB
// per connection (initial/max).
package transfer
