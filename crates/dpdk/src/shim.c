/*
 * The thin C side of bessemer-dpdk: DPDK's burst, mbuf and mempool calls are inline
 * functions or macros, so Rust reaches them through these wrappers. Everything else
 * (which port, how many queues, errors, counters in Bessemer's shape) is decided in Rust.
 * Every function returns 0 or a count on success and a negative errno on failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdio.h>
#include <string.h>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_mempool.h>

#define BSM_BURST 64

/* Implemented in Rust: one call per line DPDK logs. */
extern void bsm_dpdk_log(const char *buf, size_t len);

static ssize_t log_write(void *cookie, const char *buf, size_t len) {
  (void)cookie;
  bsm_dpdk_log(buf, len);
  return (ssize_t)len;
}

/*
 * Zero copy: mbufs laid over Bessemer's packet frames. A frame of Bessemer's pool holds the
 * 128-byte rte_mbuf in its first bytes (part of the headroom every Bessemer frame keeps in
 * front of its data) and the mbuf's buffer is the rest of the frame, so DPDK reads and
 * writes packet bytes where Bessemer has them. A mempool with the ops below hands out such
 * mbufs (Bessemer allocates the frames: bsm_zc_alloc) and takes them back (Bessemer frees
 * the packets: bsm_zc_free); each mbuf carries its Bessemer descriptor in a dynamic field.
 */
#define BSM_MBUF_HDR 128
_Static_assert(sizeof(struct rte_mbuf) <= BSM_MBUF_HDR, "rte_mbuf no longer fits the headroom");

/* Implemented in Rust (bessemer-dpdk's zc module): ctx is the mempool's pool_config. */
extern int bsm_zc_alloc(void *ctx, void **hdrs, void **descs, unsigned n);
extern void bsm_zc_free(void *ctx, void *const *descs, unsigned n);
extern unsigned bsm_zc_count(void *ctx);
extern uint32_t bsm_zc_frame_size(void *ctx);

static int desc_field = -1; /* offset of the descriptor pointer in an mbuf */
static int zc_ops_index = -1;

static inline void **desc_of(struct rte_mbuf *m) {
  return RTE_MBUF_DYNFIELD(m, desc_field, void **);
}

/*
 * A fresh mbuf header for mempool mp, with every field that does not depend on the frame
 * set: copied over each frame's first 128 bytes (two cache lines of plain vector stores;
 * a memset here compiles to `rep stos`, which cost most of a packet's time).
 */
static inline void mbuf_template(struct rte_mbuf *t, struct rte_mempool *mp, uint32_t frame_size) {
  memset(t, 0, sizeof(*t));
  t->buf_len = (uint16_t)(frame_size - BSM_MBUF_HDR);
  t->data_off = RTE_PKTMBUF_HEADROOM;
  t->nb_segs = 1;
  t->port = RTE_MBUF_PORT_INVALID;
  t->pool = mp;
  rte_mbuf_refcnt_set(t, 1);
}

static inline void copy_header(void *dst, const void *src) {
#ifdef __SSE2__
  const __m128i *s = src;
  __m128i *d = dst;
  for (int i = 0; i < (int)(sizeof(struct rte_mbuf) / 16); i++)
    _mm_storeu_si128(d + i, _mm_loadu_si128(s + i));
#else
  memcpy(dst, src, sizeof(struct rte_mbuf));
#endif
}

/*
 * Writes an mbuf header at `hdr` (64-byte aligned, inside a frame of frame_size bytes aligned
 * to its size) from the template; its buffer runs from just after the header to the frame's
 * end. Headers sit where the frame's data would begin less 128-191 bytes, not at the frame's
 * start: frames are 4 KiB apart, and headers all at their starts would share two L1 cache sets
 * (Bessemer staggers its data offsets for the same reason).
 */
static inline struct rte_mbuf *mbuf_over(const struct rte_mbuf *tmpl, void *hdr,
                                         uint32_t frame_size, uint16_t data_off, uint32_t len,
                                         void *desc) {
  struct rte_mbuf *m = hdr;
  copy_header(m, tmpl);
  m->buf_len = (uint16_t)(frame_size - ((uintptr_t)hdr & (frame_size - 1)) - BSM_MBUF_HDR);
  m->buf_addr = (char *)hdr + BSM_MBUF_HDR;
  m->buf_iova = (rte_iova_t)(uintptr_t)m->buf_addr; /* IOVA as VA only: see bsm_zc_usable */
  m->data_off = data_off;
  m->data_len = (uint16_t)len;
  m->pkt_len = len;
  *desc_of(m) = desc;
  return m;
}

static int zc_alloc_op(struct rte_mempool *mp) {
  (void)mp;
  return 0;
}

static void zc_free_op(struct rte_mempool *mp) { (void)mp; }

static int zc_enqueue(struct rte_mempool *mp, void *const *objs, unsigned n) {
  void *descs[BSM_BURST];
  while (n > 0) {
    unsigned k = n < BSM_BURST ? n : BSM_BURST;
    for (unsigned i = 0; i < k; i++)
      descs[i] = *desc_of((struct rte_mbuf *)objs[i]);
    bsm_zc_free(mp->pool_config, descs, k);
    objs += k;
    n -= k;
  }
  return 0;
}

static int zc_dequeue(struct rte_mempool *mp, void **objs, unsigned n) {
  void *hdrs[BSM_BURST], *descs[BSM_BURST];
  struct rte_mbuf tmpl;
  uint32_t fs = bsm_zc_frame_size(mp->pool_config);
  mbuf_template(&tmpl, mp, fs);
  unsigned done = 0;
  while (done < n) {
    unsigned k = n - done < BSM_BURST ? n - done : BSM_BURST;
    if (bsm_zc_alloc(mp->pool_config, hdrs, descs, k) != 0) {
      if (done > 0)
        zc_enqueue(mp, objs, done); /* all or nothing */
      return -ENOBUFS;
    }
    for (unsigned i = 0; i < k; i++)
      objs[done + i] = mbuf_over(&tmpl, hdrs[i], fs, RTE_PKTMBUF_HEADROOM, 0, descs[i]);
    done += k;
  }
  return 0;
}

static unsigned zc_get_count(const struct rte_mempool *mp) { return bsm_zc_count(mp->pool_config); }

static struct rte_mempool_ops zc_ops = {
    .name = "bessemer_zc",
    .alloc = zc_alloc_op,
    .free = zc_free_op,
    .enqueue = zc_enqueue,
    .dequeue = zc_dequeue,
    .get_count = zc_get_count,
};

/* Zero copy needs IOVA as VA (the mbufs' bus addresses are their virtual ones). */
int bsm_zc_usable(void) { return desc_field >= 0 && rte_eal_iova_mode() == RTE_IOVA_VA; }

/* A mempool of mbufs over Bessemer frames; ctx answers its allocations (see above). */
struct rte_mempool *bsm_zc_mempool(const char *name, void *ctx, uint32_t frame_size, unsigned n,
                                   unsigned cache) {
  /*
   * `cache`: a per-lcore cache (workers register as lcores). For a TX queue's mempool it pays:
   * a driver that frees sent mbufs one at a time puts them in the cache and they reach
   * Bessemer in bulk. At most about 1.5 x cache frames per worker wait there; freeing the
   * mempool flushes them back (bsm_mempool_free). An RX queue's does better without one
   * (measured: the cache's extra copy of every object costs more than it saves).
   */
  struct rte_mempool *mp = rte_mempool_create_empty(
      name, n, frame_size, cache, sizeof(struct rte_pktmbuf_pool_private), SOCKET_ID_ANY, 0);
  if (mp == NULL)
    return NULL;
  if (rte_mempool_set_ops_byname(mp, "bessemer_zc", ctx) != 0) {
    rte_mempool_free(mp);
    return NULL;
  }
  struct rte_pktmbuf_pool_private priv = {
      .mbuf_data_room_size = (uint16_t)(frame_size - BSM_MBUF_HDR), .mbuf_priv_size = 0};
  rte_pktmbuf_pool_init(mp, &priv);
  return mp;
}

/* Frees a zero-copy mempool, first handing every frame its caches hold back to Bessemer. */
void bsm_mempool_free(struct rte_mempool *mp) {
  if (mp->cache_size > 0)
    for (unsigned i = 0; i < RTE_MAX_LCORE; i++)
      rte_mempool_cache_flush(&mp->local_cache[i], mp);
  rte_mempool_free(mp);
}

/* Makes DPDK devices able to reach [addr, addr + len) (Bessemer's frame region). */
int bsm_zc_register(void *addr, size_t len, uint16_t port) {
  int r = rte_extmem_register(addr, len, NULL, 0, 4096);
  if (r < 0 && rte_errno != EEXIST)
    return -rte_errno;
  struct rte_eth_dev_info info;
  if (rte_eth_dev_info_get(port, &info) == 0 && info.device != NULL) {
    /* Virtual devices have no DMA to map: ENOTSUP is expected there. */
    if (rte_dev_dma_map(info.device, addr, (uint64_t)(uintptr_t)addr, len) < 0 &&
        rte_errno != ENOTSUP && rte_errno != EEXIST)
      return -rte_errno;
  }
  return 0;
}

/*
 * Receives up to n packets; for each, descs[i] is its Bessemer descriptor and datas[i] its
 * first byte when the mbuf is one of Bessemer's frames in one segment (it then belongs to
 * Bessemer: not freed here), else descs[i] is NULL (copy it: bsm_rx_copy_out).
 */
uint16_t bsm_rx_burst_zc(uint16_t port, uint16_t q, struct rte_mbuf **m, uint32_t *lens,
                         void **descs, uint8_t **datas, uint16_t n) {
  if (n > BSM_BURST)
    n = BSM_BURST;
  uint16_t k = rte_eth_rx_burst(port, q, m, n);
  for (uint16_t i = 0; i < k; i++) {
    struct rte_mbuf *x = m[i];
    lens[i] = rte_pktmbuf_pkt_len(x);
    if (x->pool != NULL && x->pool->ops_index == zc_ops_index && x->nb_segs == 1 &&
        x->buf_addr == (char *)x + BSM_MBUF_HDR) {
      descs[i] = *desc_of(x);
      datas[i] = rte_pktmbuf_mtod(x, uint8_t *);
    } else {
      descs[i] = NULL;
    }
  }
  return k;
}

/*
 * Sends n Bessemer packets without copying: each packet's mbuf header is written into its own
 * frame's headroom, at datas[i] less 128 rounded down to 64 bytes (the caller leaves at least
 * 192 bytes of headroom), owned by mempool mp. Returns how many the device took; the rest are
 * untouched packets of the caller's.
 */
uint16_t bsm_tx_zc(uint16_t port, uint16_t q, struct rte_mempool *mp, uint8_t *const *datas,
                   const uint32_t *lens, void *const *descs, uint16_t n) {
  struct rte_mbuf *m[BSM_BURST];
  struct rte_mbuf tmpl;
  uint32_t fs = bsm_zc_frame_size(mp->pool_config);
  mbuf_template(&tmpl, mp, fs);
  if (n > BSM_BURST)
    n = BSM_BURST;
  for (uint16_t i = 0; i < n; i++) {
    uint8_t *hdr = (uint8_t *)(((uintptr_t)datas[i] - BSM_MBUF_HDR) & ~(uintptr_t)63);
    uint16_t off = (uint16_t)(datas[i] - (hdr + BSM_MBUF_HDR));
    m[i] = mbuf_over(&tmpl, hdr, fs, off, lens[i], descs[i]);
  }
  return rte_eth_tx_burst(port, q, m, n);
}

/* Each port's mempool for copied TX buffers (and its RX queues' buffers). */
static struct rte_mempool *port_pool[RTE_MAX_ETHPORTS];

int bsm_eal_init(int argc, char **argv) {
  cookie_io_functions_t funcs = {.write = log_write};
  FILE *s = fopencookie(NULL, "w", funcs);
  if (s != NULL) {
    setvbuf(s, NULL, _IOLBF, 0);
    rte_openlog_stream(s);
  }
  rte_mempool_register_ops(&zc_ops);
  int r = rte_eal_init(argc, argv);
  if (r < 0)
    return -rte_errno;
  zc_ops_index = -1;
  for (unsigned i = 0; i < rte_mempool_ops_table.num_ops; i++)
    if (strcmp(rte_mempool_ops_table.ops[i].name, "bessemer_zc") == 0)
      zc_ops_index = (int)i;
  static const struct rte_mbuf_dynfield desc_dynfield = {
      .name = "bessemer_desc", .size = sizeof(void *), .align = __alignof__(void *)};
  desc_field = rte_mbuf_dynfield_register(&desc_dynfield);
  return r;
}

/* Makes the calling (worker) thread known to DPDK, so mempools use per-lcore caches. */
int bsm_thread_register(void) {
  if (rte_lcore_id() != LCORE_ID_ANY)
    return 0;
  return rte_thread_register() < 0 ? -rte_errno : 0;
}

const char *bsm_strerror(int e) { return rte_strerror(e < 0 ? -e : e); }

int bsm_port_by_name(const char *name, uint16_t *port) {
  int r = rte_eth_dev_get_port_by_name(name, port);
  return r < 0 ? r : 0;
}

int bsm_dev_probe(const char *devargs) {
  int r = rte_dev_probe(devargs);
  return r < 0 ? r : 0;
}

int bsm_port_valid(uint16_t port) { return rte_eth_dev_is_valid_port(port); }

uint32_t bsm_max_ethports(void) { return RTE_MAX_ETHPORTS; }

struct bsm_port_info {
  char driver[64];
  char name[RTE_ETH_NAME_MAX_LEN];
  uint16_t max_rx_queues;
  uint16_t max_tx_queues;
  uint64_t rx_offload_capa;
  uint64_t flow_type_rss_offloads;
  int32_t socket;
  uint32_t min_rx_bufsize;
  uint32_t max_rx_pktlen;
};

int bsm_port_info(uint16_t port, struct bsm_port_info *out) {
  struct rte_eth_dev_info info;
  int r = rte_eth_dev_info_get(port, &info);
  if (r < 0)
    return r;
  memset(out, 0, sizeof(*out));
  snprintf(out->driver, sizeof(out->driver), "%s", info.driver_name ? info.driver_name : "");
  rte_eth_dev_get_name_by_port(port, out->name);
  out->max_rx_queues = info.max_rx_queues;
  out->max_tx_queues = info.max_tx_queues;
  out->rx_offload_capa = info.rx_offload_capa;
  out->flow_type_rss_offloads = info.flow_type_rss_offloads;
  out->socket = rte_eth_dev_socket_id(port);
  out->min_rx_bufsize = info.min_rx_bufsize;
  out->max_rx_pktlen = info.max_rx_pktlen;
  return 0;
}

struct bsm_port_conf {
  uint16_t nrxq, ntxq;
  uint16_t rxd, txd;
  uint8_t rss, vlan_strip, vlan_filter, vlan_qinq;
  uint32_t loopback;
  uint32_t mbufs;
};

/* The offload bits, so Rust need not know DPDK's numbering. */
uint64_t bsm_offload_vlan_strip(void) { return RTE_ETH_RX_OFFLOAD_VLAN_STRIP; }
uint64_t bsm_offload_vlan_filter(void) { return RTE_ETH_RX_OFFLOAD_VLAN_FILTER; }
uint64_t bsm_offload_qinq(void) { return RTE_ETH_RX_OFFLOAD_QINQ_STRIP; }

/* Configures, sets up the queues of and starts `port`. On failure *stage names the call. */
int bsm_port_setup(uint16_t port, const struct bsm_port_conf *c, struct rte_mempool *const *rx_pools,
                   const char **stage) {
  struct rte_eth_dev_info info;
  struct rte_eth_conf conf;
  int r;
  *stage = "rte_eth_dev_info_get";
  if ((r = rte_eth_dev_info_get(port, &info)) < 0)
    return r;
  memset(&conf, 0, sizeof(conf));
  if (c->rss && c->nrxq > 1 && info.flow_type_rss_offloads != 0) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf =
        (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP) & info.flow_type_rss_offloads;
  }
  if (c->vlan_strip)
    conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_VLAN_STRIP;
  if (c->vlan_filter)
    conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_VLAN_FILTER;
  if (c->vlan_qinq)
    conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_QINQ_STRIP;
  conf.lpbk_mode = c->loopback;
  *stage = "rte_eth_dev_configure";
  if ((r = rte_eth_dev_configure(port, c->nrxq, c->ntxq, &conf)) < 0)
    return r;
  uint16_t rxd = c->rxd, txd = c->txd;
  *stage = "rte_eth_dev_adjust_nb_rx_tx_desc";
  if ((r = rte_eth_dev_adjust_nb_rx_tx_desc(port, &rxd, &txd)) < 0)
    return r;
  if (port_pool[port] == NULL) {
    char name[RTE_MEMPOOL_NAMESIZE];
    snprintf(name, sizeof(name), "bsm_port%u", port);
    unsigned n = c->mbufs;
    unsigned need = (unsigned)c->nrxq * rxd + (unsigned)c->ntxq * txd + 2 * BSM_BURST * 64;
    if (n < need)
      n = need;
    *stage = "rte_pktmbuf_pool_create";
    port_pool[port] = rte_pktmbuf_pool_create(name, n, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                              rte_eth_dev_socket_id(port));
    if (port_pool[port] == NULL)
      return -rte_errno;
  }
  int socket = rte_eth_dev_socket_id(port);
  for (uint16_t q = 0; q < c->nrxq; q++) {
    *stage = "rte_eth_rx_queue_setup";
    struct rte_mempool *mp = rx_pools != NULL && rx_pools[q] != NULL ? rx_pools[q] : port_pool[port];
    if ((r = rte_eth_rx_queue_setup(port, q, rxd, socket, NULL, mp)) < 0)
      return r;
  }
  for (uint16_t q = 0; q < c->ntxq; q++) {
    *stage = "rte_eth_tx_queue_setup";
    if ((r = rte_eth_tx_queue_setup(port, q, txd, socket, NULL)) < 0)
      return r;
  }
  *stage = "rte_eth_dev_start";
  if ((r = rte_eth_dev_start(port)) < 0)
    return r;
  /* Not every device has a promiscuous mode (virtual ones often do not): not an error. */
  rte_eth_promiscuous_enable(port);
  *stage = "";
  return 0;
}

/* Stops and closes `port`; `remove` also detaches its device (vdevs and hot-plugged PCI). */
int bsm_port_close(uint16_t port, int remove) {
  struct rte_eth_dev_info info;
  struct rte_device *dev = NULL;
  if (rte_eth_dev_info_get(port, &info) == 0)
    dev = info.device;
  rte_eth_dev_stop(port);
  int r = rte_eth_dev_close(port);
  if (remove && dev != NULL) {
    int r2 = rte_dev_remove(dev);
    if (r == 0)
      r = r2;
  }
  if (port_pool[port] != NULL) {
    rte_mempool_free(port_pool[port]);
    port_pool[port] = NULL;
  }
  return r < 0 ? r : 0;
}

/* Receives up to n packets on (port, q) into m[], their lengths into lens[]. */
uint16_t bsm_rx_burst(uint16_t port, uint16_t q, struct rte_mbuf **m, uint32_t *lens,
                      uint16_t n) {
  if (n > BSM_BURST)
    n = BSM_BURST;
  uint16_t k = rte_eth_rx_burst(port, q, m, n);
  for (uint16_t i = 0; i < k; i++)
    lens[i] = rte_pktmbuf_pkt_len(m[i]);
  return k;
}

/*
 * Copies each received m[i] (all its segments) to dst[i], which has room for it, and frees
 * the mbufs; a NULL dst[i] drops that packet.
 */
void bsm_rx_copy_out(struct rte_mbuf **m, uint8_t *const *dst, uint16_t k) {
  for (uint16_t i = 0; i < k; i++) {
    uint8_t *d = dst[i];
    if (d == NULL)
      continue;
    for (struct rte_mbuf *s = m[i]; s != NULL; s = s->next) {
      memcpy(d, rte_pktmbuf_mtod(s, void *), s->data_len);
      d += s->data_len;
    }
  }
  if (k > 0)
    rte_pktmbuf_free_bulk(m, k);
}

/*
 * Copies n packets (src[i], lens[i] bytes) into mbufs and sends them on (port, q).
 * Returns how many the device took; *nombuf is set when mbufs ran out.
 */
uint16_t bsm_tx_copy(uint16_t port, uint16_t q, const uint8_t *const *src, const uint32_t *lens,
                     uint16_t n, uint64_t *nombuf) {
  struct rte_mbuf *m[BSM_BURST];
  struct rte_mempool *mp = port_pool[port];
  if (n > BSM_BURST)
    n = BSM_BURST;
  if (mp == NULL || n == 0)
    return 0;
  if (rte_pktmbuf_alloc_bulk(mp, m, n) != 0) {
    (*nombuf)++;
    return 0;
  }
  uint16_t ok = 0;
  for (uint16_t i = 0; i < n; i++) {
    char *d = rte_pktmbuf_append(m[i], (uint16_t)lens[i]);
    if (d == NULL || lens[i] > UINT16_MAX)
      break;
    memcpy(d, src[i], lens[i]);
    ok++;
  }
  uint16_t sent = rte_eth_tx_burst(port, q, m, ok);
  if (sent < n)
    rte_pktmbuf_free_bulk(&m[sent], n - sent);
  return sent;
}

uint32_t bsm_mbuf_room(void) { return RTE_MBUF_DEFAULT_BUF_SIZE - RTE_PKTMBUF_HEADROOM; }

struct bsm_stats {
  uint64_t ipackets, opackets, ibytes, obytes, imissed, ierrors, oerrors, rx_nombuf;
  uint64_t q_ipackets[RTE_ETHDEV_QUEUE_STAT_CNTRS];
  uint64_t q_opackets[RTE_ETHDEV_QUEUE_STAT_CNTRS];
  uint64_t q_errors[RTE_ETHDEV_QUEUE_STAT_CNTRS];
};


int bsm_stats(uint16_t port, struct bsm_stats *out) {
  struct rte_eth_stats s;
  int r = rte_eth_stats_get(port, &s);
  if (r < 0)
    return r;
  out->ipackets = s.ipackets;
  out->opackets = s.opackets;
  out->ibytes = s.ibytes;
  out->obytes = s.obytes;
  out->imissed = s.imissed;
  out->ierrors = s.ierrors;
  out->oerrors = s.oerrors;
  out->rx_nombuf = s.rx_nombuf;
  for (int i = 0; i < RTE_ETHDEV_QUEUE_STAT_CNTRS; i++) {
    out->q_ipackets[i] = s.q_ipackets[i];
    out->q_opackets[i] = s.q_opackets[i];
    out->q_errors[i] = s.q_errors[i];
  }
  return 0;
}

int bsm_link(uint16_t port, uint32_t *speed, int *full_duplex, int *autoneg, int *up) {
  struct rte_eth_link l;
  memset(&l, 0, sizeof(l));
  int r = rte_eth_link_get_nowait(port, &l);
  if (r < 0)
    return r;
  *speed = l.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0 : l.link_speed;
  *full_duplex = l.link_duplex == RTE_ETH_LINK_FULL_DUPLEX;
  *autoneg = l.link_autoneg == RTE_ETH_LINK_AUTONEG;
  *up = l.link_status == RTE_ETH_LINK_UP;
  return 0;
}

int bsm_mac(uint16_t port, uint8_t mac[6]) {
  struct rte_ether_addr a;
  int r = rte_eth_macaddr_get(port, &a);
  if (r < 0)
    return r;
  memcpy(mac, a.addr_bytes, 6);
  return 0;
}

int bsm_set_mac(uint16_t port, const uint8_t mac[6]) {
  struct rte_ether_addr a;
  memcpy(a.addr_bytes, mac, 6);
  int r = rte_eth_dev_default_mac_addr_set(port, &a);
  return r < 0 ? r : 0;
}

int bsm_mtu(uint16_t port, uint16_t *mtu) {
  int r = rte_eth_dev_get_mtu(port, mtu);
  return r < 0 ? r : 0;
}

int bsm_set_mtu(uint16_t port, uint16_t mtu) {
  int r = rte_eth_dev_set_mtu(port, mtu);
  return r < 0 ? r : 0;
}

int bsm_set_link(uint16_t port, int up) {
  int r = up ? rte_eth_dev_set_link_up(port) : rte_eth_dev_set_link_down(port);
  return r < 0 ? r : 0;
}
