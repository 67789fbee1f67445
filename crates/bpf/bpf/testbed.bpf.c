// SPDX-License-Identifier: GPL-2.0
//
// The planner's veth testbed (crates/planner/src/testbed.rs, docs/planner.md "The veth
// testbed"): two programs that make a multi-queue veth pair behave like a NIC's receive
// filters, so the queue the model predicts can be checked against the queue a packet really
// arrives on.
//
// `bessemer_tbsteer` (TCX egress of the sender's veth end) emulates the receive filters of
// the modelled NIC and sets skb->queue_mapping so that the packet lands on the chosen RX
// queue of the peer. Per packet:
//   1. Parse Ethernet, IPv4 and the TCP/UDP ports into a tuple (network byte order).
//      Not IPv4: queue 0. Other IPv4 protocols and non-first fragments: ports 0.
//   2. The ordered filters, first match wins: (tuple & mask) == value (82599 5-tuple
//      filters, up to 128).
//   3. The hash tables in order, each with one mask: look up (tuple & mask) (82599: Flow
//      Director under its global mask; SFC9020: full-match, then wildcard filters).
//   4. RSS: Toeplitz hash of the addresses (and ports for TCP/UDP) under the key in the
//      configuration, low 16 bits, indexed into the indirection table.
//   5. queue q -> skb->queue_mapping = q + qmap_offset (the veth rule the testbed measured:
//      queue_mapping N arrives on the peer's RX queue N - 1).
// The configuration is double-buffered: `active` names the generation (0 or 1) a packet
// reads, so the planner writes a whole new configuration beside the old one and switches
// with one store; a packet sees one configuration or the other, never a mix.
//
// `bessemer_tbcount` (XDP on the receiving veth end) counts each flow's packets per RX queue
// (ctx->rx_queue_index) and drops them.
//
// `bessemer_tbcpu` (XDP on the receiving veth end, for the isolation experiment) hands each
// packet to the CPU its RX queue is served on (`qcpu`, through the cpumap `cpus`), as a NIC
// with one queue per core does: veth itself processes a packet on the sender's CPU.
//
// Built by crates/drivers/build.rs with `clang -O2 -target bpf`, loaded by
// crates/bpf/src/bpf_elf.rs; no kernel or libbpf headers (bessemer_bpf.h says why).

#include "bessemer_bpf.h"

#define BPF_MAP_TYPE_CPUMAP 16
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define TCX_NEXT -1
#define TCX_DROP 2

struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	// (the rest is not used)
};

static long (*bpf_map_update_elem)(void *map, const void *key, const void *value,
				   __u64 flags) = (void *)2;
static long (*bpf_skb_load_bytes)(const void *skb, __u32 offset, void *to, __u32 len) =
	(void *)26;

// Keep the layouts below in step with crates/planner/src/testbed.rs.

// A packet's fields, in network byte order. `eth` is the EtherType (the counter keys
// non-IPv4 frames by it; the steering masks leave it out).
struct tuple {
	__u8 proto;
	__u8 pad;
	__u8 eth[2];
	__u8 sip[4];
	__u8 dip[4];
	__u8 sport[2];
	__u8 dport[2];
} __attribute__((aligned(8)));	// read as two 64-bit words

#define ORDERED_MAX 128
#define TABLES_MAX 2
#define RSS_MAX 128
#define DEST_DROP 0xffff

#define F_ON 1	// steer (otherwise leave the packet alone)
#define F_RAW 2	// set queue_mapping = raw on every packet (to measure the veth rule)
#define F_RSS 4	// RSS on (otherwise unmatched packets go to queue 0)

struct config {
	__u32 flags;
	__u16 qmap_offset;
	__u16 raw;
	__u32 n_ordered;
	__u32 n_tables;
	struct tuple tmask[TABLES_MAX];
	__u32 rss_mask;	// indirection table size - 1 (a power of two up to RSS_MAX)
	__u8 key[40];	// Toeplitz key
	__u16 rss[RSS_MAX];
	__u32 pad;
};

struct ordered {
	struct tuple value;
	struct tuple mask;
	__u32 dest;
	__u32 pad;
};

struct hkey {
	struct tuple t;
	__u32 gen_table;	// generation << 8 | table
	__u32 pad;
};

struct counts {
	__u64 q[16];
};

// The sizes crates/planner/src/testbed.rs writes.
_Static_assert(sizeof(struct tuple) == 16, "tuple");
_Static_assert(sizeof(struct config) == 352, "config");
_Static_assert(sizeof(struct ordered) == 40, "ordered");
_Static_assert(sizeof(struct hkey) == 24, "hkey");
_Static_assert(sizeof(struct counts) == 128, "counts");

struct map_def active SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, 4, 1, 0 };
struct map_def config SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct config), 2, 0 };
struct map_def ordered SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct ordered), 2 * ORDERED_MAX, 0 };
struct map_def hashed SEC("maps") = { BPF_MAP_TYPE_HASH, sizeof(struct hkey), 4, 20480, 0 };
struct map_def flows SEC("maps") = { BPF_MAP_TYPE_HASH, sizeof(struct tuple), sizeof(struct counts), 65536, 0 };
struct map_def qcpu SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, 4, 64, 0 };
struct map_def cpus SEC("maps") = { BPF_MAP_TYPE_CPUMAP, 4, 8, 64, 0 };

static __attribute__((always_inline)) __u64 w0(const struct tuple *t)
{
	return *(const __u64 *)t;
}
static __attribute__((always_inline)) __u64 w1(const struct tuple *t)
{
	return *((const __u64 *)t + 1);
}

// Toeplitz hash of in[0..12) under key. `kw` holds the 64 key bits from input bit p on: the
// window for bit p is its top 32 bits, and after each input byte the next key byte comes in
// at the bottom. Zero bytes add nothing, so the hash of addresses followed by zero ports is
// the hash of the addresses alone.
static __attribute__((always_inline)) __u32 toeplitz(const __u8 *in, const __u8 *key)
{
	__u32 result = 0;
	__u64 kw = 0;
#pragma unroll
	for (int i = 0; i < 8; i++)
		kw = kw << 8 | key[i];
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < 12; i++) {
		__u8 b = in[i];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			if (b & (0x80 >> j))
				result ^= (__u32)(kw >> 32);
			kw <<= 1;
		}
		kw |= key[i + 8];
	}
	return result;
}

SEC("tc")
int bessemer_tbsteer(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__u32 *gp = bpf_map_lookup_elem(&active, &zero);
	if (!gp)
		return TCX_NEXT;
	__u32 gen = *gp & 1;
	struct config *cfg = bpf_map_lookup_elem(&config, &gen);
	if (!cfg || !(cfg->flags & F_ON))
		return TCX_NEXT;
	if (cfg->flags & F_RAW) {
		skb->queue_mapping = cfg->raw;
		return TCX_NEXT;
	}

	__u32 dest = 0;
	__u8 eth[14];
	__u8 ip[20];
	struct tuple t = {};
	if (bpf_skb_load_bytes(skb, 0, eth, 14) < 0 || eth[12] != 0x08 || eth[13] != 0x00)
		goto out;
	// An IPv4 frame too short or malformed for the header goes to queue 0 like non-IPv4.
	if (bpf_skb_load_bytes(skb, 14, ip, 20) < 0 || (ip[0] >> 4) != 4 || (ip[0] & 15) < 5)
		goto out;
	t.proto = ip[9];
	__builtin_memcpy(t.sip, &ip[12], 4);
	__builtin_memcpy(t.dip, &ip[16], 4);
	int l4 = t.proto == 6 || t.proto == 17;
	int first_fragment = ((ip[6] & 0x1f) | ip[7]) == 0;
	if (l4 && first_fragment) {
		__u32 off = 14 + (ip[0] & 15) * 4;
		if (bpf_skb_load_bytes(skb, off, t.sport, 4) < 0) {
			t.sport[0] = t.sport[1] = t.dport[0] = t.dport[1] = 0;
		}
	}
	__u64 a = w0(&t), b = w1(&t);

	for (__u32 i = 0; i < ORDERED_MAX; i++) {
		if (i >= cfg->n_ordered)
			break;
		__u32 slot = gen * ORDERED_MAX + i;
		struct ordered *o = bpf_map_lookup_elem(&ordered, &slot);
		if (!o)
			break;
		if ((a & w0(&o->mask)) == w0(&o->value) && (b & w1(&o->mask)) == w1(&o->value)) {
			dest = o->dest;
			goto found;
		}
	}
	for (__u32 i = 0; i < TABLES_MAX; i++) {
		if (i >= cfg->n_tables)
			break;
		struct hkey k;
		k.gen_table = gen << 8 | i;
		k.pad = 0;
		*(__u64 *)&k.t = a & w0(&cfg->tmask[i]);
		*((__u64 *)&k.t + 1) = b & w1(&cfg->tmask[i]);
		__u32 *d = bpf_map_lookup_elem(&hashed, &k);
		if (d) {
			dest = *d;
			goto found;
		}
	}
	if (cfg->flags & F_RSS) {
		// The hash input: addresses, then ports for TCP and UDP (t.sip..t.dport are
		// contiguous, in packet order; other protocols have zero ports).
		__u32 h = toeplitz(t.sip, cfg->key);
		dest = cfg->rss[h & 0xffff & cfg->rss_mask & (RSS_MAX - 1)];
	}
found:
	if (dest == DEST_DROP)
		return TCX_DROP;
out:
	skb->queue_mapping = dest + cfg->qmap_offset;
	return TCX_NEXT;
}

SEC("xdp")
int bessemer_tbcount(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct tuple t = {};
	if ((void *)(p + 14) > end)
		goto count;
	t.eth[0] = p[12];
	t.eth[1] = p[13];
	if (p[12] != 0x08 || p[13] != 0x00 || (void *)(p + 34) > end)
		goto count;
	if ((p[14] >> 4) != 4 || (p[14] & 15) < 5)
		goto count;
	t.proto = p[23];
	__builtin_memcpy(t.sip, p + 26, 8);
	if ((t.proto == 6 || t.proto == 17) && ((p[20] & 0x1f) | p[21]) == 0) {
		__u8 *l4 = p + 14 + (p[14] & 15) * 4;
		if ((void *)(l4 + 4) <= end)
			__builtin_memcpy(t.sport, l4, 4);
	}
count:;
	__u32 q = ctx->rx_queue_index;
	if (q > 15)
		q = 15;	// the last slot also holds queues beyond it
	struct counts *c = bpf_map_lookup_elem(&flows, &t);
	if (!c) {
		struct counts z = {};
		bpf_map_update_elem(&flows, &t, &z, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&flows, &t);
	}
	if (c)
		__sync_fetch_and_add(&c->q[q], 1);
	return XDP_DROP;
}

SEC("xdp/cpu")
int bessemer_tbcpu(struct xdp_md *ctx)
{
	__u32 q = ctx->rx_queue_index;
	__u32 *cpu = bpf_map_lookup_elem(&qcpu, &q);
	if (!cpu)
		return XDP_PASS;
	// An empty cpumap slot: the packet stays where it is (XDP_PASS).
	return bpf_redirect_map(&cpus, *cpu, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
