// SPDX-License-Identifier: GPL-2.0
//
// Bessemer's XDP offload program: the part of a pipeline the planner found the XDP "NIC" can
// do (crates/planner/src/offload.rs, docs/planner.md "Offload into XDP").
//
// Per packet:
//  1. Gather the classifier's key: key[i] = pkt[off[i]] & mask[i] for i < key_len (ExactMatch
//     fields are packet bytes at fixed offsets with masks, so a byte-gather covers any of
//     them, the IPv4 5-tuple included). A packet too short for a key byte goes up to user
//     space, where ExactMatch decides what a short packet does.
//  2. Look the key up in `rules`; on a miss take the configured default action.
//  3. Count the packet and its bytes in the entry's slot of the per-CPU `counters`.
//  4. Rewrite (MAC swap, destination MAC), then drop, XDP_TX, redirect through `devs`
//     (a devmap) or redirect to the AF_XDP socket of the RX queue (`xsks`, the port's own
//     XSKMAP, which the loader reuses): the user-space pipeline then does the rest.
//
// Compiled by crates/drivers/build.rs with `clang -O2 -target bpf`; loaded by
// crates/drivers/src/bpf_elf.rs. No kernel or libbpf headers (bessemer_bpf.h says why).

#include "bessemer_bpf.h"

// UAPI values (include/uapi/linux/bpf.h).
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_DEVMAP 14
#define BPF_MAP_TYPE_XSKMAP 17
#define XDP_TX 3

static int (*bpf_xdp_get_buff_len)(struct xdp_md *ctx) = (void *)188;

#define KEY_MAX 32

// Keep in step with crates/planner/src/offload.rs (Action::to_bytes, KeyLayout).
enum kind { K_XSK = 0, K_DROP = 1, K_TX = 2, K_REDIRECT = 3 };
#define F_MACSWAP 1
#define F_SET_DMAC 2

struct action {
	__u8 kind;
	__u8 flags;
	__u8 dmac[6];
	__u32 dev;	// slot in `devs` for K_REDIRECT
	__u32 counter;	// slot in `counters`
};

// config.layout: how to gather the key.
#define L_GENERIC 0	// byte by byte from off[]/mask[]
#define L_5TUPLE 1	// IPv4 proto, addresses and ports at 23, 26..37, unmasked

struct config {
	__u32 key_len;	// 0: no classifier, every packet takes the default action
	__u32 layout;	// L_*: the planner's specialisation for a common key
	struct action def;	// what a miss does
	__u16 off[KEY_MAX];
	__u8 mask[KEY_MAX];
};

struct counter {
	__u64 packets;
	__u64 bytes;
};

// Counter slots the program itself uses.
#define C_SHORT 0	// too short for the key (or for a rewrite): up to user space

struct map_def xsks SEC("maps") = { BPF_MAP_TYPE_XSKMAP, 4, 4, 64, 0 };
struct map_def devs SEC("maps") = { BPF_MAP_TYPE_DEVMAP, 4, 4, 64, 0 };
struct map_def config SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct config), 1, 0 };
struct map_def rules SEC("maps") = { BPF_MAP_TYPE_HASH, KEY_MAX, sizeof(struct action), 65536, 0 };
struct map_def counters SEC("maps") = { BPF_MAP_TYPE_PERCPU_ARRAY, 4, sizeof(struct counter), 65540, 0 };

static __attribute__((always_inline)) void count(__u32 slot, __u64 bytes)
{
	struct counter *c = bpf_map_lookup_elem(&counters, &slot);
	if (c) {
		c->packets += 1;
		c->bytes += bytes;
	}
}

static __attribute__((always_inline)) int to_user(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

SEC("xdp")
int bessemer_offload(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return to_user(ctx);
	__u64 len = (__u64)bpf_xdp_get_buff_len(ctx);

	__u8 key[KEY_MAX] = {};
	__u32 n = cfg->key_len;
	if (cfg->layout == L_5TUPLE) {
		// The common case with constant offsets: one bounds check, no per-byte loop.
		__u8 *p = data;
		if ((void *)(p + 38) > data_end) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		key[0] = p[23];
		__builtin_memcpy(&key[1], p + 26, 12);
		n = 0;	// gathered: skip the loop
	}
	for (__u32 i = 0; i < KEY_MAX; i++) {
		if (i >= n)
			break;
		// Offsets are below 512 (the loader refuses others), which bounds the pointer
		// for the verifier; the data_end check covers the byte itself.
		__u8 *p = (__u8 *)data + (cfg->off[i] & 511);
		if ((void *)(p + 1) > data_end) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		key[i] = *p & cfg->mask[i];
	}

	struct action *a = 0;
	if (cfg->key_len)
		a = bpf_map_lookup_elem(&rules, key);
	if (!a)
		a = &cfg->def;

	__u8 kind = a->kind;
	if (kind == K_XSK) {
		count(a->counter, len);
		return to_user(ctx);
	}
	if (a->flags & (F_MACSWAP | F_SET_DMAC)) {
		__u8 *eth = data;
		// MACSwap drops frames shorter than an Ethernet header in user space (a drop
		// reason of its own): leave them to it.
		if ((void *)(eth + 14) > data_end) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		if (a->flags & F_MACSWAP) {
#pragma unroll
			for (int i = 0; i < 6; i++) {
				__u8 t = eth[i];
				eth[i] = eth[6 + i];
				eth[6 + i] = t;
			}
		}
		if (a->flags & F_SET_DMAC) {
#pragma unroll
			for (int i = 0; i < 6; i++)
				eth[i] = a->dmac[i];
		}
	}
	count(a->counter, len);
	if (kind == K_DROP)
		return XDP_DROP;
	if (kind == K_TX)
		return XDP_TX;
	// A redirect to an empty devmap slot drops (flags 0): the loader fills the slot before
	// any rule names it.
	return bpf_redirect_map(&devs, a->dev, 0);
}

char _license[] SEC("license") = "GPL";
