package agent

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/reclaimnet/reclaimnet/localapi"
)

func (a *Agent) httpPort() int {
	if a.httpLn == nil {
		return 0
	}
	return a.httpLn.Addr().(*net.TCPAddr).Port
}

// DataDir is the data dir in use (a temporary one with --dev).
func (a *Agent) DataDir() string { return a.cfg.DataDir }

// HTTPAddr is the bound HTTP address, or "" when HTTP is off.
func (a *Agent) HTTPAddr() string {
	if a.httpLn == nil {
		return ""
	}
	return a.httpLn.Addr().String()
}

func (a *Agent) makeInfo() localapi.Info {
	ip, port := a.mesh.LocalAddr()
	host := ip.String()
	return localapi.Info{
		PID:          os.Getpid(),
		Node:         a.cfg.Name,
		GossipAddr:   net.JoinHostPort(host, strconv.Itoa(int(port))),
		RaftAddr:     a.raftAddr(),
		TransferAddr: net.JoinHostPort(host, strconv.Itoa(a.cfg.TransferPort)),
		HTTPAddr:     a.HTTPAddr(),
		Socket:       filepath.Join(a.cfg.DataDir, localapi.SocketFile),
		Storage:      a.cfg.Storage(),
	}
}

func (a *Agent) raftAddr() string {
	if a.coord != nil {
		return a.coord.Addr()
	}
	ip, _ := a.mesh.LocalAddr()
	return net.JoinHostPort(ip.String(), strconv.Itoa(a.cfg.RaftPort))
}

// writeInfo writes InfoFile atomically.
func (a *Agent) writeInfo() error {
	b, err := json.MarshalIndent(a.info, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(a.cfg.DataDir, localapi.InfoFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
