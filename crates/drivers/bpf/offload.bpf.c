// SPDX-License-Identifier: GPL-2.0
//
// Bessemer's XDP offload program: the part of a pipeline the planner found the XDP "NIC" can
// do (crates/planner/src/offload/, docs/planner.md "Offload into XDP").
//
// Per packet:
//  1. Classify, by the configured classifier (`config.cls`):
//     - ExactMatch: gather the key, key[i] = pkt[off[i]] & mask[i] for i < key_len (fields are
//       packet bytes at fixed offsets with masks, so a byte-gather covers any of them, the
//       IPv4 5-tuple included), and look it up in `rules`.
//     - IPLookup: the IPv4 destination in the LPM trie `lpm`, only for a frame the user-space
//       module would route (Ethernet + IPv4 header its checks accept); any other frame goes
//       up, where IPLookup decides which drop reason it gets.
//     - WildcardMatch: gather the key as for ExactMatch (masks all ones), then tuple-space
//       search: per distinct rule mask t (at most WM_MASKS) look up (t, key & wmask[t]) in
//       `wrules`; the entry of highest priority wins. The planner refuses tables where two
//       rules of equal priority under different masks can match one packet, so there are
//       no ties to break here.
//     - VLANSplit: the gate is the outer tag's VID (0 untagged), looked up in `rules` as a
//       2-byte key; every gate's rewrite program starts with the pop VLANSplit does.
//     - BPF: the module's classic BPF filters (pcap-filter expressions libpcap compiled), in
//       the order the module tries them, run by the interpreter below; the first to return
//       non-zero names the gate, none gives gate 0; the gate is then looked up in `rules` as
//       a 2-byte key, as VLANSplit's VID.
//     A packet too short for a key byte goes up to user space, where the classifier decides
//     what a short packet does. A miss takes the configured default action.
//  2. Count the packet and its bytes in the entry's slot of the per-CPU `counters`.
//  3. Rewrite: MAC swap / destination MAC (action flags), or a rewrite program from `progs`
//     (MACSwap, Update, VLANPush, VLANPop of the chain, in order). The program's min_len is
//     the shortest frame no module of the chain drops as too short (the planner's bound over
//     every tag the chain may push or pop); a shorter frame, or one without the headroom its
//     pushes need, goes up untouched, before any byte is changed.
//  4. Drop, XDP_TX, redirect through `devs` (a devmap) or redirect to the AF_XDP socket of
//     the RX queue (`xsks`, the port's own XSKMAP, which the loader reuses): the user-space
//     pipeline then does the rest.
//
// Compiled by crates/drivers/build.rs with `clang -O2 -target bpf`; loaded by
// crates/bpf/src/bpf_elf.rs. No kernel or libbpf headers (bessemer_bpf.h says why).

#include "bessemer_bpf.h"

// UAPI values (include/uapi/linux/bpf.h).
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_LPM_TRIE 11
#define BPF_MAP_TYPE_DEVMAP 14
#define BPF_MAP_TYPE_XSKMAP 17
#define BPF_F_NO_PREALLOC 1
#define XDP_TX 3

static int (*bpf_xdp_get_buff_len)(struct xdp_md *ctx) = (void *)188;
static long (*bpf_xdp_adjust_head)(struct xdp_md *ctx, int delta) = (void *)44;
static long (*bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx,
			__u64 flags) = (void *)181;
static long (*bpf_xdp_load_bytes)(struct xdp_md *ctx, __u32 offset, void *buf,
				  __u32 len) = (void *)189;

#define KEY_MAX 32
#define WM_MASKS 8
#define PROG_OPS 24
// BPF classifier: filters per bank, instructions per filter (the planner refuses more).
#define CBPF_FILTERS 32
#define CBPF_INSNS 256

// Keep in step with crates/planner/src/offload/ (Action::to_bytes, Plan::config_bytes,
// prog_bytes).
enum kind { K_XSK = 0, K_DROP = 1, K_TX = 2, K_REDIRECT = 3 };
#define F_MACSWAP 1
#define F_SET_DMAC 2

struct action {
	__u8 kind;
	__u8 flags;
	__u8 dmac[6];
	__u32 dev;	// slot in `devs` for K_REDIRECT
	__u32 counter;	// slot in `counters`
	__u32 prog;	// slot in `progs`; 0: no rewrite program
	__u32 prio;	// WildcardMatch: the rule's priority ^ 0x80000000 (unsigned order)
};

// config.layout: how to gather the key.
#define L_GENERIC 0	// byte by byte from off[]/mask[]
#define L_5TUPLE 1	// IPv4 proto, addresses and ports at 23, 26..37, unmasked

// config.cls: the classifier.
#define C_EXACT 0	// ExactMatch (or none when key_len is 0)
#define C_LPM 1	// IPLookup
#define C_WILD 2	// WildcardMatch
#define C_VLAN 3	// VLANSplit
#define C_BPF 4	// BPF: classic BPF filters from `cbpf`

struct config {
	__u32 key_len;	// 0 (ExactMatch): no classifier, every packet takes the default action
	__u32 layout;	// L_*: the planner's specialisation for a common key
	struct action def;	// what a miss does
	__u16 off[KEY_MAX];
	__u8 mask[KEY_MAX];
	__u32 cls;
	__u32 n_masks;	// C_WILD: masks in use
	__u8 wmask[WM_MASKS][KEY_MAX];
	__u32 n_filters;	// C_BPF: filters in use
	__u32 steps;	// C_BPF: the interpreter's step bound (each filter's length + 1, summed)
	__u32 bank;	// C_BPF: which half of `cbpf` holds them (the planner writes the other)
};

struct lpm_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct wild_key {
	__u32 mask;	// index into config.wmask
	__u8 key[KEY_MAX];
};

// Rewrite program operations.
#define OP_MACSWAP 1
#define OP_WRITE 2	// val[0..size] at off (Update)
#define OP_PUSH 3	// VLAN tag with TCI val[0..2]
#define OP_POP 4

struct op {
	__u8 type;
	__u8 size;
	__u16 off;
	__u8 val[8];
};

struct prog {
	__u16 min_len;
	__u8 n_ops;
	__u8 pushes;
	struct op ops[PROG_OPS];
};

// A classic BPF instruction (struct sock_filter / struct bpf_insn of libpcap).
struct cbpf_insn {
	__u16 code;
	__u8 jt;
	__u8 jf;
	__u32 k;
};

struct cbpf_prog {
	__u32 n;	// instructions
	__u16 gate;	// the filter's gate
	__u16 pad;
	struct cbpf_insn insns[CBPF_INSNS];
};

// The classic BPF interpreter: one bpf_loop step runs one instruction, so the verifier checks
// the step once, not every path through every filter. The state lives in a per-CPU map, not
// on the stack: values read from a map are unknown to the verifier, so it does not tell the
// steps apart by pc or filter index (it would walk the callback once per value and give
// up). Only the context pointer is passed on the stack. One state per CPU is enough: XDP runs
// to completion on its CPU, and nothing else uses the map.
struct cbpf_state {
	__u32 len;	// the frame's length (linear: the caller sends other frames up)
	__u32 base;	// the bank's first slot in `cbpf`
	__u32 n;	// filters
	__u32 f;	// the filter running
	__u32 pc;
	__u32 a;
	__u32 x;
	__u32 matched;	// 1: filter f returned non-zero
	__u32 gate;
	__u32 mem[16];
};

struct cbpf_run {
	struct xdp_md *ctx;
};

struct counter {
	__u64 packets;
	__u64 bytes;
};

// Counter slots the program itself uses.
#define C_SHORT 0	// too short for the key or a rewrite, or not a frame the classifier
			// routes here: up to user space

struct map_def xsks SEC("maps") = { BPF_MAP_TYPE_XSKMAP, 4, 4, 64, 0 };
struct map_def devs SEC("maps") = { BPF_MAP_TYPE_DEVMAP, 4, 4, 64, 0 };
struct map_def config SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct config), 1, 0 };
struct map_def rules SEC("maps") = { BPF_MAP_TYPE_HASH, KEY_MAX, sizeof(struct action), 65536, 0 };
struct map_def lpm SEC("maps") = {
	BPF_MAP_TYPE_LPM_TRIE, sizeof(struct lpm_key), sizeof(struct action), 65536,
	BPF_F_NO_PREALLOC };
struct map_def wrules SEC("maps") = {
	BPF_MAP_TYPE_HASH, sizeof(struct wild_key), sizeof(struct action), 65536,
	BPF_F_NO_PREALLOC };
struct map_def progs SEC("maps") = { BPF_MAP_TYPE_ARRAY, 4, sizeof(struct prog), 256, 0 };
struct map_def cbpf SEC("maps") = {
	BPF_MAP_TYPE_ARRAY, 4, sizeof(struct cbpf_prog), 2 * CBPF_FILTERS, 0 };
struct map_def cbpfst SEC("maps") = {
	BPF_MAP_TYPE_PERCPU_ARRAY, 4, sizeof(struct cbpf_state), 1, 0 };
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

// What IPLookup would route: the frame passes smoltcp's Ethernet and IPv4 checks and is
// version 4. Its destination goes to *dst; 0 when the module would drop the frame (the
// reason is the module's to count) or it is beyond the linear part: up to user space.
static __attribute__((always_inline)) int routable(void *data, void *data_end, __u64 len,
						   __u8 *dst)
{
	__u8 *p = data;
	if ((void *)(p + 34) > data_end)
		return 0;
	if (p[12] != 0x08 || p[13] != 0x00)
		return 0;
	__u32 ihl = (__u32)(p[14] & 15) * 4;
	__u32 total = ((__u32)p[16] << 8) | p[17];
	__u64 l3 = len - 14;
	if ((p[14] >> 4) != 4 || ihl < 20 || ihl > total || total > l3)
		return 0;
	__builtin_memcpy(dst, p + 30, 4);
	return 1;
}

// Runs rewrite program `pg`: 0 done, 1 nothing changed and the packet must go up (too short,
// no headroom), -1 the packet changed under a check the planner's bound makes impossible.
static __attribute__((always_inline)) int rewrite(struct xdp_md *ctx, struct prog *pg)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + (pg->min_len & 0x1fff) > data_end)
		return 1;
	int room = (int)(pg->pushes & 31) * 4;
	if (room) {
		// Every push's headroom, reserved up front so that no push fails half-way.
		if (bpf_xdp_adjust_head(ctx, -room))
			return 1;
		bpf_xdp_adjust_head(ctx, room);
	}
	for (__u32 i = 0; i < PROG_OPS; i++) {
		if (i >= pg->n_ops)
			break;
		struct op *o = &pg->ops[i];
		__u8 *d = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if ((void *)(d + 18) > data_end)
			return -1;
		if (o->type == OP_MACSWAP) {
#pragma unroll
			for (int k = 0; k < 6; k++) {
				__u8 t = d[k];
				d[k] = d[6 + k];
				d[6 + k] = t;
			}
		} else if (o->type == OP_WRITE) {
			__u32 off = o->off & 4095;
			for (__u32 k = 0; k < 8; k++) {
				if (k >= o->size)
					break;
				__u8 *b = d + off + k;
				if ((void *)(b + 1) > data_end)
					return -1;
				*b = o->val[k];
			}
		} else if (o->type == OP_PUSH) {
			// 0x88a8 over an existing 802.1Q tag, else 0x8100, as VLANPush.
			int q = d[12] == 0x81 && d[13] == 0x00;
			if (bpf_xdp_adjust_head(ctx, -4))
				return -1;
			d = (void *)(long)ctx->data;
			data_end = (void *)(long)ctx->data_end;
			if ((void *)(d + 18) > data_end)
				return -1;
#pragma unroll
			for (int k = 0; k < 12; k++)
				d[k] = d[k + 4];
			d[12] = q ? 0x88 : 0x81;
			d[13] = q ? 0xa8 : 0x00;
			d[14] = o->val[0];
			d[15] = o->val[1];
		} else if (o->type == OP_POP) {
			int tagged = (d[12] == 0x81 && d[13] == 0x00) ||
				     (d[12] == 0x88 && d[13] == 0xa8);
			if (tagged) {
#pragma unroll
				for (int k = 11; k >= 0; k--)
					d[k + 4] = d[k];
				if (bpf_xdp_adjust_head(ctx, 4))
					return -1;
			}
		}
	}
	return 0;
}

// Classic BPF opcodes (include/uapi/linux/filter.h; the module's interpreter is the
// reference: crates/modules/src/classify/bpf.rs).
#define LD_W_ABS 0x20
#define LD_H_ABS 0x28
#define LD_B_ABS 0x30
#define LD_W_IND 0x40
#define LD_H_IND 0x48
#define LD_B_IND 0x50
#define LD_W_LEN 0x80
#define LD_IMM 0x00
#define LD_MEM 0x60
#define LDX_W_LEN 0x81
#define LDX_IMM 0x01
#define LDX_MEM 0x61
#define LDX_MSH 0xb1
#define ST_MEM 0x02
#define STX_MEM 0x03
#define RET_K 0x06
#define RET_A 0x16
#define TAX 0x07
#define TXA 0x87

// Loads `size` bytes at `off` big-endian into *v; -1 past the end (the filter returns 0, as
// the module's and the kernel's filters do). bpf_xdp_load_bytes bounds-checks again.
static __attribute__((always_inline)) int cbpf_load(struct cbpf_run *r, struct cbpf_state *s,
						    __u64 off, int size, __u32 *v)
{
	__u8 b[4] = {};
	if (off + size > s->len)
		return -1;
	if (size == 4) {
		if (bpf_xdp_load_bytes(r->ctx, (__u32)off, b, 4))
			return -1;
		*v = ((__u32)b[0] << 24) | ((__u32)b[1] << 16) | ((__u32)b[2] << 8) | b[3];
	} else if (size == 2) {
		if (bpf_xdp_load_bytes(r->ctx, (__u32)off, b, 2))
			return -1;
		*v = ((__u32)b[0] << 8) | b[1];
	} else {
		if (bpf_xdp_load_bytes(r->ctx, (__u32)off, b, 1))
			return -1;
		*v = b[0];
	}
	return 0;
}

// A jump: the next pc, or past the end (the filter then returns 0) when it leaves the
// program (the planner's check and the module's validator make that impossible).
static __attribute__((always_inline)) __u32 cbpf_jump(__u32 pc, __u64 off, __u32 n)
{
	__u64 t = (__u64)pc + off;
	return t < n ? (__u32)t : CBPF_INSNS;
}

static long cbpf_step(__u64 index, void *arg)
{
	__u32 zero = 0;
	struct cbpf_state *r = bpf_map_lookup_elem(&cbpfst, &zero);
	if (!r)
		return 1;
	// The slot is checked by the map (the caller keeps n within a bank), the index by the
	// mask.
	if (r->f >= r->n)
		return 1;
	__u32 slot = r->base + r->f;
	struct cbpf_prog *p = bpf_map_lookup_elem(&cbpf, &slot);
	if (!p)
		return 1;	// f < n: the caller sends the packet up
	__u32 n = p->n;
	__u32 ret = 0;
	int done = 1;
	if (r->pc < n) {
		struct cbpf_insn *in = &p->insns[r->pc & (CBPF_INSNS - 1)];
		__u32 k = in->k, a = r->a, x = r->x, v = 0;
		__u16 code = in->code;
		__u32 pc = r->pc + 1;
		done = 0;
		switch (code & 7) {
		case 0:	// LD
		case 1:	// LDX
			switch (code) {
			case LD_W_ABS:
			case LD_H_ABS:
			case LD_B_ABS:
			case LD_W_IND:
			case LD_H_IND:
			case LD_B_IND: {
				__u64 off = (code & 0x40) ? (__u64)x + k : k;
				int size = (code & 0x18) == 0 ? 4 : (code & 0x18) == 8 ? 2 : 1;
				if (cbpf_load(arg, r, off, size, &v))
					done = 1;
				else
					a = v;
				break;
			}
			case LD_W_LEN:
				a = r->len;
				break;
			case LD_IMM:
				a = k;
				break;
			case LD_MEM:
				a = r->mem[k & 15];
				break;
			case LDX_W_LEN:
				x = r->len;
				break;
			case LDX_IMM:
				x = k;
				break;
			case LDX_MEM:
				x = r->mem[k & 15];
				break;
			case LDX_MSH:
				if (cbpf_load(arg, r, k, 1, &v))
					done = 1;
				else
					x = (v & 15) << 2;
				break;
			default:
				done = 1;
			}
			break;
		case 2:	// ST
		case 3:	// STX
			if (code == ST_MEM)
				r->mem[k & 15] = a;
			else if (code == STX_MEM)
				r->mem[k & 15] = x;
			else
				done = 1;
			break;
		case 4: {	// ALU
			__u32 s = (code & 8) ? x : k;
			switch (code & 0xf0) {
			case 0x00: a += s; break;
			case 0x10: a -= s; break;
			case 0x20: a *= s; break;
			case 0x30: if (s) a /= s; else done = 1; break;
			case 0x40: a |= s; break;
			case 0x50: a &= s; break;
			case 0x60: a = s < 32 ? a << s : 0; break;
			case 0x70: a = s < 32 ? a >> s : 0; break;
			case 0x80: a = -a; break;
			case 0x90: if (s) a %= s; else done = 1; break;
			case 0xa0: a ^= s; break;
			default: done = 1;
			}
			break;
		}
		case 5: {	// JMP
			__u32 s = (code & 8) ? x : k;
			int c;
			switch (code & 0xf0) {
			case 0x00:
				pc = cbpf_jump(pc, k, n);
				goto next;
			case 0x10: c = a == s; break;
			case 0x20: c = a > s; break;
			case 0x30: c = a >= s; break;
			case 0x40: c = (a & s) != 0; break;
			default: c = 0; done = 1;
			}
			pc = cbpf_jump(pc, c ? in->jt : in->jf, n);
			break;
		}
		case 6:	// RET
			ret = code == RET_A ? a : code == RET_K ? k : 0;
			done = 1;
			break;
		default:	// MISC
			if (code == TAX)
				x = a;
			else if (code == TXA)
				a = x;
			else
				done = 1;
		}
next:
		r->a = a;
		r->x = x;
		r->pc = pc;
	}
	if (!done)
		return 0;
	if (ret) {
		r->matched = 1;
		r->gate = p->gate;
		return 1;
	}
	// This filter did not match: the next one starts from a clean state, as in the module.
	r->f += 1;
	r->pc = 0;
	r->a = 0;
	r->x = 0;
#pragma unroll
	for (int i = 0; i < 16; i++)
		r->mem[i] = 0;
	return 0;
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

	struct action *a = 0;
	if (cfg->cls == C_LPM) {
		struct lpm_key lk = { 32, {} };
		if (!routable(data, data_end, len, lk.addr)) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		a = bpf_map_lookup_elem(&lpm, &lk);
	} else if (cfg->cls == C_BPF) {
		// The filters see the whole frame; a multi-buffer one goes up rather than have
		// its loads past the linear part differ.
		if (len != (__u64)(data_end - data)) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		struct cbpf_run run = { ctx };
		struct cbpf_state *r = bpf_map_lookup_elem(&cbpfst, &zero);
		if (!r) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		__builtin_memset(r, 0, sizeof(*r));
		r->len = (__u32)len;
		r->base = (cfg->bank & 1) * CBPF_FILTERS;
		r->n = cfg->n_filters < CBPF_FILTERS ? cfg->n_filters : CBPF_FILTERS;
		bpf_loop(cfg->steps & 0xffff, cbpf_step, &run, 0);
		// A lookup failure, or filters left when the step bound ran out (the planner's
		// bound makes that impossible): unsure, up.
		if (!r->matched && r->f < r->n) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		__u8 key[KEY_MAX] = {};
		if (r->matched) {
			key[0] = r->gate >> 8;
			key[1] = r->gate;
		}
		a = bpf_map_lookup_elem(&rules, key);
	} else if (cfg->cls == C_VLAN) {
		// The gate: the outer tag's VID, 0 when untagged. The rule's program pops the tag.
		__u8 *p = data;
		__u8 key[KEY_MAX] = {};
		if ((void *)(p + 18) > data_end) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		if ((p[12] == 0x81 && p[13] == 0x00) || (p[12] == 0x88 && p[13] == 0xa8)) {
			key[0] = p[14] & 0x0f;
			key[1] = p[15];
		}
		a = bpf_map_lookup_elem(&rules, key);
	} else {
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
			// Offsets are below 512 (the loader refuses others), which bounds the
			// pointer for the verifier; the data_end check covers the byte itself.
			__u8 *p = (__u8 *)data + (cfg->off[i] & 511);
			if ((void *)(p + 1) > data_end) {
				count(C_SHORT, len);
				return to_user(ctx);
			}
			key[i] = *p & cfg->mask[i];
		}
		if (cfg->cls == C_WILD) {
			struct wild_key wk;
			for (__u32 t = 0; t < WM_MASKS; t++) {
				if (t >= cfg->n_masks)
					break;
				wk.mask = t;
#pragma unroll
				for (int j = 0; j < KEY_MAX; j++)
					wk.key[j] = key[j] & cfg->wmask[t][j];
				struct action *w = bpf_map_lookup_elem(&wrules, &wk);
				if (w && (!a || w->prio > a->prio))
					a = w;
			}
		} else if (cfg->key_len) {
			a = bpf_map_lookup_elem(&rules, key);
		}
	}
	if (!a)
		a = &cfg->def;

	__u8 kind = a->kind;
	if (kind == K_XSK) {
		count(a->counter, len);
		return to_user(ctx);
	}
	if (a->prog) {
		__u32 slot = a->prog;
		struct prog *pg = bpf_map_lookup_elem(&progs, &slot);
		if (!pg) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		int r = rewrite(ctx, pg);
		if (r > 0) {
			count(C_SHORT, len);
			return to_user(ctx);
		}
		if (r < 0)
			return XDP_DROP;
	} else if (a->flags & (F_MACSWAP | F_SET_DMAC)) {
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
