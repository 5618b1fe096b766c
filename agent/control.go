package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/mesh"
)

// listenControl creates the Unix socket with mode 0600. A socket file left
// by a dead agent is removed (the data-dir lock proves no agent uses it).
func listenControl(dir string) (net.Listener, error) {
	path := filepath.Join(dir, localapi.SocketFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket permissions: %w", err)
	}
	return ln, nil
}

// serveControl answers requests until the listener is closed.
func (a *Agent) serveControl(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		a.wg.Go(func() { a.handleControl(conn) })
	}
}

func (a *Agent) handleControl(conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req localapi.Request
	dec := json.NewDecoder(io.LimitReader(bufio.NewReader(conn), 64<<10))
	resp := localapi.Response{}
	if err := dec.Decode(&req); err != nil {
		resp = localapi.Response{Error: fmt.Sprintf("bad request: %v", err), Kind: localapi.KindBadRequest}
	} else {
		resp = a.control(req)
	}
	json.NewEncoder(conn).Encode(resp)
}

func (a *Agent) control(req localapi.Request) localapi.Response {
	switch req.Op {
	case localapi.OpMembers:
		st := a.Status()
		return localapi.Response{Status: &st}
	case localapi.OpStatus:
		st := a.Status()
		doc, err := a.webDocument()
		if err != nil {
			return localapi.Response{Error: err.Error(), Kind: localapi.KindInternal}
		}
		return localapi.Response{Status: &st, Document: doc}
	case localapi.OpJoin:
		if len(req.Peers) == 0 {
			return localapi.Response{Error: "join: no peers", Kind: localapi.KindBadRequest}
		}
		n, err := a.Join(req.Peers)
		if err != nil {
			kind := localapi.KindInternal
			switch {
			case errors.Is(err, mesh.ErrPeerUnreachable):
				kind = localapi.KindPeerUnreachable
			case errors.Is(err, mesh.ErrWrongGossipKey):
				kind = localapi.KindWrongGossipKey
			}
			return localapi.Response{Error: err.Error(), Kind: kind}
		}
		return localapi.Response{Joined: n}
	case localapi.OpRun, localapi.OpJobs, localapi.OpLogs, localapi.OpCancel:
		return a.jobControl(req)
	case localapi.OpTraceExport:
		doc, err := a.view.TraceDocument(time.Now())
		if err != nil {
			return localapi.Response{Error: err.Error(), Kind: localapi.KindInternal}
		}
		return localapi.Response{Trace: string(doc)}
	case localapi.OpReclaim, localapi.OpReclaimStatus, localapi.OpReclaimCancel, localapi.OpReclaimNow:
		return a.reclaim.Handle(req)
	}
	return localapi.Response{Error: fmt.Sprintf("unknown operation %q", req.Op), Kind: localapi.KindBadRequest}
}
