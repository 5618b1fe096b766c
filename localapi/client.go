package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNoAgent is returned by Call when no agent listens on the data dir.
var ErrNoAgent = errors.New("no agent running")

// Call sends one request to the agent whose data dir is dir.
func Call(ctx context.Context, dir string, req Request) (Response, error) {
	conn, err := dial(ctx, dir)
	if err != nil {
		return Response{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return Response{}, fmt.Errorf("send request: %w", err)
	}
	var resp Response
	if err := json.NewDecoder(io.LimitReader(conn, 64<<20)).Decode(&resp); err != nil {
		return Response{}, fmt.Errorf("read response: %w", err)
	}
	return resp, nil
}

// dial connects to the control socket of the agent whose data dir is dir.
func dial(ctx context.Context, dir string) (net.Conn, error) {
	path := filepath.Join(dir, SocketFile)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w with data dir %s (start one with 'reclaimnet agent', or set --data-dir / RECLAIMNET_DATA_DIR)", ErrNoAgent, dir)
		}
		return nil, fmt.Errorf("reach agent at %s: %w", path, err)
	}
	return conn, nil
}
