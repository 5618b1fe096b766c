package transfer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/reclaimnet/reclaimnet/ckpt"
	"github.com/reclaimnet/reclaimnet/pki"
)

// DefaultPort is the transfer listener's UDP port.
const DefaultPort = 7948

// Config configures a Client or a Server.
type Config struct {
	// TLS makes this node's TLS configurations: its certificate bundle, or
	// its pki.Identity so that a renewed certificate is presented without
	// a restart.
	TLS pki.TLSSource
	// Store is the local checkpoint store: the sender reads chunks from it,
	// the receiver writes into it. Its MaxBytes is the receiver's disk
	// quota. A Client that only fetches needs none.
	Store *ckpt.Store
	// Streams is how many data streams a sender uses in parallel and how
	// many a receiver accepts per connection.
	Streams int
	// MaxTransfers bounds the transfers a Server handles at once; more are
	// refused with FAIL refused.
	MaxTransfers int
	// Compression chooses the chunk encoding (sender).
	Compression Compression
	// Attempts is how many connections a sender tries before giving up
	// (each new one resumes from what the receiver holds).
	Attempts int
	// RetryBackoff is the pause between attempts.
	RetryBackoff time.Duration
	// IdleTimeout closes a connection that hears nothing for this long (a
	// broken path is detected after it).
	IdleTimeout time.Duration
	// HandshakeTimeout bounds the QUIC+TLS handshake.
	HandshakeTimeout time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// PendingMaxAge is how long a receiver keeps a pending version (a
	// transfer that broke and may resume) that no connection is receiving
	// and that saw no activity, measured by the store's clock; then its
	// partial data is removed. 0 means DefaultPendingMaxAge; negative means
	// never.
	PendingMaxAge time.Duration

	// corruptChunk, when set (tests only), may alter a chunk's encoded bytes
	// after the sender built them, before encryption: end-to-end check of the
	// receiver's per-chunk hash verification and re-request.
	corruptChunk func(h ckpt.Hash, payload []byte)
	// chunkStored, when set (figures and tests), is called by a receiver
	// (or a fetch) after it stored a verified chunk of rawSize bytes.
	chunkStored func(rawSize int)
	// fetchAttempt, when set (tests), is called as each connection of a
	// fetch begins, with its number.
	fetchAttempt func(n int)
}

// DefaultPendingMaxAge is the default Config.PendingMaxAge: far longer than
// any notice window, so only senders that are gone lose their partial data.
const DefaultPendingMaxAge = time.Hour

func (c Config) pendingMaxAge() time.Duration {
	if c.PendingMaxAge == 0 {
		return DefaultPendingMaxAge
	}
	return c.PendingMaxAge
}

// DefaultConfig returns production defaults; set TLS and Store.
func DefaultConfig() Config {
	return Config{
		Streams:          4, // enough to keep 2-4 cores compressing
		MaxTransfers:     8, // concurrent incoming transfers
		Compression:      CompressAuto,
		Attempts:         5, // a flaky campus link gets a few resumes
		RetryBackoff:     500 * time.Millisecond,
		IdleTimeout:      10 * time.Second, // under a typical notice window
		HandshakeTimeout: 5 * time.Second,
		PendingMaxAge:    DefaultPendingMaxAge,
	}
}

// DefaultLocalConfig is DefaultConfig with short timeouts for tests on
// loopback.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.RetryBackoff = 50 * time.Millisecond
	c.IdleTimeout = 2 * time.Second
	c.HandshakeTimeout = 2 * time.Second
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("transfer: no checkpoint store"))
	}
	return errors.Join(append(errs, c.validateNet())...)
}

// validateNet checks all but the store.
func (c Config) validateNet() error {
	var errs []error
	if c.TLS == nil {
		errs = append(errs, errors.New("transfer: no TLS bundle"))
	}
	if c.Streams < 1 || c.Streams > 64 {
		errs = append(errs, fmt.Errorf("transfer: streams %d outside 1..64", c.Streams))
	}
	if c.MaxTransfers < 1 {
		errs = append(errs, fmt.Errorf("transfer: max transfers %d < 1", c.MaxTransfers))
	}
	if c.Attempts < 1 {
		errs = append(errs, fmt.Errorf("transfer: attempts %d < 1", c.Attempts))
	}
	if c.IdleTimeout <= 0 || c.HandshakeTimeout <= 0 {
		errs = append(errs, errors.New("transfer: timeouts must be positive"))
	}
	return errors.Join(errs...)
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// quicConfig returns the QUIC settings, with receive windows (8/32 MiB per
// stream, 16/64 MiB per connection) large enough for several Gbit/s.
func (c Config) quicConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           c.HandshakeTimeout,
		MaxIdleTimeout:                 c.IdleTimeout,
		KeepAlivePeriod:                c.IdleTimeout / 3,
		InitialStreamReceiveWindow:     8 << 20,
		MaxStreamReceiveWindow:         32 << 20,
		InitialConnectionReceiveWindow: 16 << 20,
		MaxConnectionReceiveWindow:     64 << 20,
		MaxIncomingStreams:             1, // the control stream
		MaxIncomingUniStreams:          int64(c.Streams),
	}
}

// Application error codes on CONNECTION_CLOSE.
const (
	codeOK        quic.ApplicationErrorCode = 0
	codeCancelled quic.ApplicationErrorCode = 1
	codeFailed    quic.ApplicationErrorCode = 2
)

// Errors a sender returns (match with errors.Is).
var (
	// ErrRefused: the receiver refused the transfer (busy, not authorised,
	// bad manifest).
	ErrRefused = errors.New("transfer refused by receiver")
	// ErrRemoteQuota: the receiver's store cannot fit the checkpoint.
	ErrRemoteQuota = errors.New("receiver quota exceeded")
	// ErrRemoteDiskFull: the receiver's disk filled; it removed the partial
	// data and committed nothing.
	ErrRemoteDiskFull = errors.New("receiver disk full")
	// ErrCorruptInTransit: a chunk kept arriving corrupt.
	ErrCorruptInTransit = errors.New("chunk corrupt in transit")
	// ErrCancelled: the transfer was cancelled.
	ErrCancelled = errors.New("transfer cancelled")
)

// maxChunkRetries is how often a receiver asks again for a chunk that
// arrived corrupt before it gives up.
const maxChunkRetries = 5

// pieceSize is the most bytes written to a stream per token-bucket wait.
const pieceSize = 32 << 10
