//go:build ignore

// reclaimnet.c holds ReclaimNet's two TC programs (docs/design.md P3.5, P3.7):
//
//   egress_flows:       per-flow token-bucket ceilings, DSCP marks and
//                       per-destination byte counters (migration vs other);
//   ingress_killswitch: drops new connection attempts (soft) or all traffic
//                       (hard) addressed to the protected ports.
//
// Packets are read with bpf_skb_load_bytes, so a header that is not in the
// linear area or lies past the end of the packet is handled the same way:
// the load fails and the packet is treated as unparseable (passed).
//
// Compile with bpf2go (see gen.go); the generated object is committed.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// Verdicts. PASS is TC_ACT_UNSPEC (TCX_NEXT): the packet goes on to any
// later program in the chain and then up or out as usual.
#define VERDICT_PASS TC_ACT_UNSPEC
#define VERDICT_DROP TC_ACT_SHOT

#define NSEC_PER_SEC 1000000000ULL
// Caps that keep the bucket arithmetic inside 64 bits: elapsed time is
// capped at 2^40 ns (~18 min) and the rate at 2^34 bytes/s (~137 Gbit/s),
// so (elapsed % 1e9) * rate < 2^64 and (elapsed / 1e9) * rate < 2^45.
#define MAX_ELAPSED_NS (1ULL << 40)
#define MAX_RATE (1ULL << 34)

#define MODE_OFF 0
#define MODE_SOFT 1
#define MODE_HARD 2

#define QUIC_V1 0x00000001
#define QUIC_V2 0x6b3343cf

#define MAX_IPV6_EXT 6

#define FRAG_NONE 0
#define FRAG_FIRST 1 // first fragment: carries the L4 header
#define FRAG_LATER 2 // later fragment: no L4 header

// flow_key identifies one transfer on the sending node. IPv4 destinations
// are stored as IPv4-mapped IPv6 addresses (::ffff:a.b.c.d). Ports are in
// host byte order.
struct flow_key {
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

// flow_val is one flow's class, token bucket and counters, guarded by lock.
// Userspace writes it with BPF_F_LOCK.
struct flow_val {
	struct bpf_spin_lock lock;
	__u8 class;
	__u8 dscp; // 0: leave the DS field alone
	__u16 pad;
	__u64 rate;    // ceiling, bytes per second
	__u64 burst;   // bucket depth, bytes
	__u64 tokens;  // bytes
	__u64 last_ns; // CLOCK_MONOTONIC of the last refill
	__u64 pass_packets;
	__u64 pass_bytes;
	__u64 drop_packets; // over the ceiling: policy violations
	__u64 drop_bytes;
};

struct dest_key {
	__u8 addr[16];
};

// dest_val counts bytes that left towards one destination, split into
// flows in the flow table (ReclaimNet transfers) and everything else.
struct dest_val {
	__u64 migration_bytes;
	__u64 migration_packets;
	__u64 other_bytes;
	__u64 other_packets;
};

struct ks_config {
	__u32 mode;
};

struct port_key {
	__u16 port; // host byte order
	__u8 proto;
	__u8 pad;
};

struct ks_stats {
	__u64 seen;           // packets the program ran on
	__u64 drop_syn;       // soft: TCP SYN without ACK
	__u64 drop_initial;   // soft: QUIC long-header Initial
	__u64 drop_hard;      // hard: anything to a protected port
	__u64 pass_protected; // to a protected port and passed (soft mode)
	__u64 pass_unparsed;  // unparseable, truncated or fragment: passed
	__u64 first_drop_ns;  // CLOCK_MONOTONIC of the first drop since reset
	__u64 last_drop_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct flow_key);
	__type(value, struct flow_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct dest_key);
	__type(value, struct dest_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dest_bytes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ks_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ks_mode SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct port_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ks_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ks_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ks_counts SEC(".maps");

// pkt is what parse learned about a packet.
struct pkt {
	__u8 daddr[16];
	__u32 l4_off;
	__u16 sport;
	__u16 dport;
	__u8 family; // 4 or 6
	__u8 proto;  // L4 protocol
	__u8 frag;   // FRAG_*
	__u8 l4_ok;  // sport and dport were read
};

// parse reads the L3 header and, when present, the L4 ports. It returns
// 1 for IP, 0 for non-IP and -1 for an IP packet it cannot parse.
static __always_inline int parse(struct __sk_buff *skb, struct pkt *p)
{
	__u16 eth_proto;
	if (bpf_skb_load_bytes(skb, 12, &eth_proto, 2) < 0)
		return 0;

	if (eth_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) < 0)
			return -1;
		if (ip.version != 4 || ip.ihl < 5)
			return -1;
		p->family = 4;
		p->proto = ip.protocol;
		__builtin_memset(p->daddr, 0, 10);
		p->daddr[10] = 0xff;
		p->daddr[11] = 0xff;
		__builtin_memcpy(&p->daddr[12], &ip.daddr, 4);
		__u16 fo = bpf_ntohs(ip.frag_off);
		if (fo & 0x1fff) {
			p->frag = FRAG_LATER;
			return 1;
		}
		if (fo & 0x2000)
			p->frag = FRAG_FIRST;
		p->l4_off = ETH_HLEN + ip.ihl * 4;
	} else if (eth_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip6, sizeof(ip6)) < 0)
			return -1;
		if (ip6.version != 6)
			return -1;
		p->family = 6;
		__builtin_memcpy(p->daddr, &ip6.daddr, 16);
		__u8 nh = ip6.nexthdr;
		__u32 off = ETH_HLEN + sizeof(ip6);
		int i;
		for (i = 0; i < MAX_IPV6_EXT; i++) {
			__u8 h[4];
			if (nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING || nh == IPPROTO_DSTOPTS) {
				if (bpf_skb_load_bytes(skb, off, h, 2) < 0)
					return -1;
				nh = h[0];
				off += ((__u32)h[1] + 1) * 8;
			} else if (nh == IPPROTO_FRAGMENT) {
				if (bpf_skb_load_bytes(skb, off, h, 4) < 0)
					return -1;
				nh = h[0];
				off += 8;
				__u16 fo = ((__u16)h[2] << 8) | h[3];
				if (fo & 0xfff8) {
					p->proto = nh;
					p->frag = FRAG_LATER;
					return 1;
				}
				if (fo & 1)
					p->frag = FRAG_FIRST;
			} else if (nh == IPPROTO_AH) {
				if (bpf_skb_load_bytes(skb, off, h, 2) < 0)
					return -1;
				nh = h[0];
				off += ((__u32)h[1] + 2) * 4;
			} else {
				break;
			}
		}
		if (i == MAX_IPV6_EXT)
			return -1;
		p->proto = nh;
		p->l4_off = off;
	} else {
		return 0;
	}

	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) {
		__u16 ports[2];
		if (bpf_skb_load_bytes(skb, p->l4_off, ports, 4) == 0) {
			p->sport = bpf_ntohs(ports[0]);
			p->dport = bpf_ntohs(ports[1]);
			p->l4_ok = 1;
		}
	}
	return 1;
}

// refill adds the tokens earned since last_ns: tokens += elapsed * rate,
// capped at burst. Called with the flow's lock held (no helper calls).
static __always_inline void refill(struct flow_val *f, __u64 now)
{
	if (now <= f->last_ns)
		return;
	__u64 elapsed = now - f->last_ns;
	if (elapsed > MAX_ELAPSED_NS)
		elapsed = MAX_ELAPSED_NS;
	__u64 rate = f->rate;
	if (rate > MAX_RATE)
		rate = MAX_RATE;
	__u64 add = (elapsed / NSEC_PER_SEC) * rate + ((elapsed % NSEC_PER_SEC) * rate) / NSEC_PER_SEC;
	__u64 tokens = f->tokens + add;
	if (tokens > f->burst || tokens < f->tokens)
		tokens = f->burst;
	f->tokens = tokens;
	f->last_ns = now;
}

// set_dscp rewrites the DSCP bits of the DS field and keeps the two ECN
// bits; for IPv4 it updates the header checksum incrementally first.
static __always_inline void set_dscp(struct __sk_buff *skb, __u8 family, __u8 dscp)
{
	__u8 b[2];
	if (bpf_skb_load_bytes(skb, ETH_HLEN, b, 2) < 0)
		return;
	if (family == 4) {
		__u8 tos = (dscp << 2) | (b[1] & 0x03);
		if (tos == b[1])
			return;
		__u16 old_word, new_word;
		__u8 nb[2] = {b[0], tos};
		__builtin_memcpy(&old_word, b, 2);
		__builtin_memcpy(&new_word, nb, 2);
		bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), old_word, new_word, 2);
		bpf_skb_store_bytes(skb, ETH_HLEN + 1, &tos, 1, 0);
		return;
	}
	// IPv6: version(4) | traffic class(8) | flow label(20); no L3 checksum
	// and the L4 pseudo-header does not cover the traffic class.
	__u8 tc = ((b[0] & 0x0f) << 4) | (b[1] >> 4);
	__u8 ntc = (dscp << 2) | (tc & 0x03);
	if (ntc == tc)
		return;
	b[0] = (b[0] & 0xf0) | (ntc >> 4);
	b[1] = (b[1] & 0x0f) | ((ntc & 0x0f) << 4);
	bpf_skb_store_bytes(skb, ETH_HLEN, b, 2, 0);
}

SEC("tc")
int egress_flows(struct __sk_buff *skb)
{
	struct pkt p = {};
	if (parse(skb, &p) <= 0)
		return VERDICT_PASS; // not IP or unparseable: untouched, uncounted

	// wire_len is the length the qdisc layer accounts (set before TC
	// egress): for a GSO super-packet it adds the headers of every
	// segment, so the bucket and the counters see what goes on the wire.
	__u64 len = skb->wire_len;
	if (len < skb->len)
		len = skb->len;
	struct flow_val *f = NULL;
	struct flow_key k = {};
	if (p.l4_ok) {
		__builtin_memcpy(k.daddr, p.daddr, 16);
		k.sport = p.sport;
		k.dport = p.dport;
		k.proto = p.proto;
		f = bpf_map_lookup_elem(&flows, &k);
	}

	__u8 dscp = 0;
	if (f) {
		__u64 now = bpf_ktime_get_ns();
		int drop = 0;
		bpf_spin_lock(&f->lock);
		refill(f, now);
		if (f->tokens >= len) {
			f->tokens -= len;
			f->pass_packets++;
			f->pass_bytes += len;
		} else {
			drop = 1;
			f->drop_packets++;
			f->drop_bytes += len;
		}
		dscp = f->dscp;
		bpf_spin_unlock(&f->lock);
		if (drop)
			return VERDICT_DROP;
		if (dscp)
			set_dscp(skb, p.family, dscp & 0x3f);
	}

	struct dest_key dk;
	__builtin_memcpy(dk.addr, p.daddr, 16);
	struct dest_val *d = bpf_map_lookup_elem(&dest_bytes, &dk);
	if (!d) {
		struct dest_val zero = {};
		bpf_map_update_elem(&dest_bytes, &dk, &zero, BPF_NOEXIST);
		d = bpf_map_lookup_elem(&dest_bytes, &dk);
		if (!d)
			return VERDICT_PASS;
	}
	if (f) {
		d->migration_bytes += len;
		d->migration_packets++;
	} else {
		d->other_bytes += len;
		d->other_packets++;
	}
	return VERDICT_PASS;
}

static __always_inline int ks_drop(struct ks_stats *st, __u64 *counter)
{
	if (st) {
		__u64 now = bpf_ktime_get_ns();
		(*counter)++;
		if (!st->first_drop_ns)
			st->first_drop_ns = now;
		st->last_drop_ns = now;
	}
	return VERDICT_DROP;
}

SEC("tc")
int ingress_killswitch(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct ks_stats *st = bpf_map_lookup_elem(&ks_counts, &zero);
	__u64 scratch = 0;
	if (st)
		st->seen++;
	struct ks_config *cfg = bpf_map_lookup_elem(&ks_mode, &zero);
	if (!cfg)
		return VERDICT_PASS;
	__u32 mode = cfg->mode;
	if (mode != MODE_SOFT && mode != MODE_HARD)
		return VERDICT_PASS;

	struct pkt p = {};
	int r = parse(skb, &p);
	if (r == 0)
		return VERDICT_PASS; // not IP
	if (r < 0 || !p.l4_ok) {
		if (st)
			st->pass_unparsed++;
		return VERDICT_PASS; // no destination port to judge by
	}
	struct port_key pk = {.port = p.dport, .proto = p.proto};
	if (!bpf_map_lookup_elem(&ks_ports, &pk))
		return VERDICT_PASS; // never touch other ports

	if (mode == MODE_HARD)
		return ks_drop(st, st ? &st->drop_hard : &scratch);

	if (p.frag) {
		if (st)
			st->pass_unparsed++;
		return VERDICT_PASS;
	}
	if (p.proto == IPPROTO_TCP) {
		__u8 flags;
		if (bpf_skb_load_bytes(skb, p.l4_off + 13, &flags, 1) < 0) {
			if (st)
				st->pass_unparsed++;
			return VERDICT_PASS;
		}
		// SYN (0x02) without ACK (0x10): a new connection.
		if ((flags & 0x12) == 0x02)
			return ks_drop(st, st ? &st->drop_syn : &scratch);
	} else {
		__u8 h[5];
		if (bpf_skb_load_bytes(skb, p.l4_off + 8, h, 5) < 0) {
			if (st)
				st->pass_unparsed++;
			return VERDICT_PASS;
		}
		if (h[0] & 0x80) { // long header
			__u32 version = ((__u32)h[1] << 24) | ((__u32)h[2] << 16) | ((__u32)h[3] << 8) | h[4];
			__u8 type = (h[0] >> 4) & 0x03;
			if ((version == QUIC_V1 && type == 0) || (version == QUIC_V2 && type == 1))
				return ks_drop(st, st ? &st->drop_initial : &scratch);
		}
	}
	if (st)
		st->pass_protected++;
	return VERDICT_PASS;
}
