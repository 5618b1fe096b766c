package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/reclaimnet/reclaimnet/localapi"
	"github.com/reclaimnet/reclaimnet/pki"
	"github.com/reclaimnet/reclaimnet/pki/enroll"
	"github.com/reclaimnet/reclaimnet/policy"
	"github.com/reclaimnet/reclaimnet/state"
)

// isAdmin reports whether c may create tokens and remove nodes: root, the
// agent's user, or a user or group given with --admins.
func (a *Agent) isAdmin(c caller) bool { return c.privileged() || c.in(a.cfg.Admins) }

// isMachineOwner reports whether c may reclaim this machine, lend it and
// flip its kill-switch: root, the agent's user, or a user or group given
// with --owners.
func (a *Agent) isMachineOwner(c caller) bool { return a.cfg.isMachineOwner(c) }

func (cfg *Config) isMachineOwner(c caller) bool { return c.privileged() || c.in(cfg.Owners) }

// ownerName is how a job submitted by c records its owner: user@node.
func (a *Agent) ownerName(c caller) string { return c.Name + "@" + a.cfg.Name }

// requester is how a command asked for by c names them to the leader,
// which checks it again (raft.checkForwarder): user@node, and whether
// this node counts them as a cluster admin.
func (a *Agent) requester(c caller) state.Requester {
	return state.Requester{User: a.ownerName(c), Admin: a.isAdmin(c)}
}

// mayManage reports whether c may cancel job j or read its logs: its
// owner (the same user on the node it was submitted on) or an admin.
func (a *Agent) mayManage(c caller, j state.JobRecord) bool {
	return j.Owner == a.ownerName(c) || a.isAdmin(c)
}

func forbidden(format string, args ...any) localapi.Response {
	return localapi.Response{Error: fmt.Sprintf(format, args...), Kind: localapi.KindForbidden}
}

// identityControl answers the token and node-removal operations.
func (a *Agent) identityControl(req localapi.Request, who caller) localapi.Response {
	if !a.isAdmin(who) {
		return forbidden("%s: user %s is not a cluster admin of node %s (root, or a user named by the agent's --admins)", req.Op, who.Name, a.cfg.Name)
	}
	c := a.Coordinator()
	if c == nil {
		return localapi.Response{Error: "coordinator not running", Kind: localapi.KindInternal}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	now := time.Now().UTC().Round(0)
	switch req.Op {
	case localapi.OpTokenCreate:
		ttl := req.TTL
		if ttl == 0 {
			ttl = enroll.DefaultTokenTTL
		}
		tok, rec, err := enroll.NewToken(pki.Fingerprint(a.tls.CA), ttl, req.Uses, now)
		if err != nil {
			return localapi.Response{Error: "token create: " + err.Error(), Kind: localapi.KindBadRequest}
		}
		if _, err := c.Submit(ctx, state.AddToken{Token: rec, Requester: a.requester(who)}); err != nil {
			return submitError("token create", err)
		}
		a.logger.Info("join token created", "token", tok.ID, "by", who.Name, "expires", rec.Expires, "uses", rec.MaxUses)
		return localapi.Response{Token: tok.Encode(), Tokens: []localapi.TokenInfo{tokenInfo(rec, now)}}
	case localapi.OpTokenList:
		st := c.State()
		out := []localapi.TokenInfo{}
		for _, r := range st.Enrollment.ListTokens() {
			out = append(out, tokenInfo(r, now))
		}
		return localapi.Response{Tokens: out}
	case localapi.OpTokenRevoke:
		if req.TokenID == "" {
			return localapi.Response{Error: "token revoke: no token ID", Kind: localapi.KindBadRequest}
		}
		if _, ok := c.State().Enrollment.Tokens[req.TokenID]; !ok {
			return localapi.Response{Error: fmt.Sprintf("token revoke: no token %q ('reclaimnet token list' shows the IDs)", req.TokenID), Kind: localapi.KindUnknownToken}
		}
		if _, err := c.Submit(ctx, state.RevokeToken{ID: req.TokenID, At: now, Requester: a.requester(who)}); err != nil {
			return submitError("token revoke", err)
		}
		a.logger.Info("join token revoked", "token", req.TokenID, "by", who.Name)
		return localapi.Response{}
	case localapi.OpNodeRemove:
		node := req.Node
		if err := pki.ValidNodeName(node); err != nil {
			return localapi.Response{Error: "node remove: " + err.Error(), Kind: localapi.KindBadRequest}
		}
		if node == a.cfg.Name {
			return localapi.Response{Error: fmt.Sprintf("node remove: %s is this node; remove it from another member", node), Kind: localapi.KindBadRequest}
		}
		st := c.State()
		_, known := st.Nodes[policy.NodeID(node)]
		_, enrolled := st.Enrollment.Nodes[node]
		if !known && !enrolled {
			return localapi.Response{Error: fmt.Sprintf("node remove: the cluster has no node %q ('reclaimnet members' lists them)", node), Kind: localapi.KindBadRequest}
		}
		if _, err := c.Submit(ctx, state.RemoveNode{Node: policy.NodeID(node), At: now, Requester: a.requester(who)}); err != nil {
			return submitError("node remove", err)
		}
		a.logger.Info("node removed", "node", node, "by", who.Name)
		return localapi.Response{Node: node}
	}
	return localapi.Response{Error: fmt.Sprintf("unknown operation %q", req.Op), Kind: localapi.KindBadRequest}
}

func tokenInfo(r enroll.Record, now time.Time) localapi.TokenInfo {
	return localapi.TokenInfo{ID: r.ID, State: string(r.State(now)), Created: r.Created, Expires: r.Expires,
		MaxUses: r.MaxUses, Used: r.Used, Nodes: r.Nodes, Revoked: r.Revoked, CA: r.CA}
}
