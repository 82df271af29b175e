/*
 * batch.c: many sequences decoded together over one model (batch.h).
 *
 * The batch drives a decoder opened over S slots (decode.c,
 * ortep__decoder_open_slots): its session holds the decode steps of 1, 2,
 * 4, ... S sequences (every row its own sequence, computed as it would be
 * alone), one slot's prefill chunks, and the caches [S, capacity, ...] of
 * every layer, each slot's range committed as its tokens arrive (kv.c).
 *
 * A slot is free, or holds one request: its prompt goes in chunks (the
 * decoder's plan: the largest chunk that fits, greedily; what is left
 * below the smallest chunk rides in the decode steps as a row, a token a
 * step), then every step feeds the
 * token it emitted last as its row of the decode step, and the row's draw
 * is the next token. The sampler's block of each slot is written when a
 * request takes the slot; the device history is the slot's row.
 *
 * A request's prompt may start with positions another slot has run the
 * same way (a system prompt): the slot then takes their KV (kv.c: the
 * whole pages mapped from one shared prefix, the last one copied) and its
 * history instead of running them (take_prefix).
 *
 * Nothing in a steady step allocates: rows, results and every slot's ids
 * are sized at open; a request's copy of its tokens is made when it ends.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "ortep/batch.h"

#define DEFAULT_SLOTS 8
#define MAX_SLOTS     256

typedef struct request {
  ortep_request_id id;
  ortep_request_state state;
  int32_t *prompt;
  size_t n;
  ortep_generate_options o; /* o.stop_tokens: the request's copy */
  bool sampling;
  ortep_sample_params sp;
  ortep_batch_callback cb;
  void *user;
  size_t slot;
  ortep_generate_result result;
  int32_t *tokens; /* once ended: the generated tokens (result.generated) */
  ortep_status status;
  char message[512];
  struct request *next_waiting;
} request;

typedef struct slot {
  request *r;   /* NULL: free */
  size_t fed;   /* prompt tokens run */
  size_t pos;   /* positions its caches hold */
  int32_t next; /* the token emitted last, fed by the next decode step */
  int32_t *ids; /* the token at each position it holds */
  int32_t *gen; /* the tokens it generated, in order */
} slot;

struct ortep_batch {
  ortep_decoder *d;
  ortep__decoder_parts p;
  size_t n_slots, capacity, budget, smallest_chunk;
  bool share; /* prompts take what other slots ran (options.disable_prefix_sharing: never) */
  slot *slots;
  request **reqs; /* every request not forgotten, in the order added */
  size_t n_reqs, cap_reqs;
  request *wait_head, *wait_tail;
  ortep_request_id next_id;
  ortep_sample_params *params; /* [slots]: what the device holds */
  bool params_dirty;
  int32_t *row_tok, *row_pos, *row_slot, *result, *chunk_pos, *chunk_slot;
  size_t *row_slot_of; /* row -> slot */
  atomic_flag busy;
  bool in_callback;
  ortep_batch_stats st;
};

/* --- requests -------------------------------------------------------------- */
static request *find(const ortep_batch *b, ortep_request_id id) {
  for (size_t i = 0; i < b->n_reqs; i++)
    if (b->reqs[i]->id == id) return b->reqs[i];
  return NULL;
}
/* find, or ORTEP_E_OUT_OF_RANGE naming the call */
static ortep_status lookup(const ortep_batch *b, ortep_request_id id, const char *what, request **out) {
  *out = find(b, id);
  return *out ? ORTEP_OK : ortep__fail(ORTEP_E_OUT_OF_RANGE, "%s: no request %llu", what, (unsigned long long)id);
}

static void free_request(request *r) {
  if (!r) return;
  ortep__free(r->prompt);
  ortep__free((void *)(uintptr_t)r->o.stop_tokens);
  ortep__free(r->tokens);
  ortep__free(r);
}

static void forget(ortep_batch *b, request *r) {
  for (size_t i = 0; i < b->n_reqs; i++)
    if (b->reqs[i] == r) {
      memmove(b->reqs + i, b->reqs + i + 1, (b->n_reqs - i - 1) * sizeof *b->reqs);
      b->n_reqs--;
      break;
    }
  free_request(r);
}

/* The slot's request ends (DONE, FAILED or CANCELLED): its tokens copied
 * out, its slot's memory given back, its final event sent (a request with
 * a callback is then forgotten). */
static void end_request(ortep_batch *b, request *r, ortep_request_state state) {
  slot *s = &b->slots[r->slot];
  size_t n = r->result.generated;
  if (n && (r->tokens = ortep__malloc(n * sizeof *r->tokens))) memcpy(r->tokens, s->gen, n * sizeof *r->tokens);
  if (n && !r->tokens) r->result.generated = 0; /* no memory for the copy: the events had them */
  /* decommitting needs no memory; a failure leaves pages mapped, reused by the slot's next request */
  if (ortep__kv_drop_slot(b->p.kv, r->slot, 0) != ORTEP_OK) ortep_clear_error();
  s->r = NULL, s->fed = s->pos = 0;
  r->state = state;
  r->slot = (size_t)-1;
  b->st.running--;
  if (state == ORTEP_REQUEST_CANCELLED || !r->cb) return;
  ortep_batch_event e = {state == ORTEP_REQUEST_DONE ? ORTEP_BATCH_DONE : ORTEP_BATCH_FAILED,
                         r->id,
                         -1,
                         0,
                         r->result,
                         r->status,
                         r->message};
  b->in_callback = true;
  r->cb(&e, r->user);
  b->in_callback = false;
  forget(b, r);
}

static void fail_request(ortep_batch *b, request *r, ortep_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_request(ortep_batch *b, request *r, ortep_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->message, sizeof r->message, fmt, ap);
  va_end(ap);
  r->status = st;
  end_request(b, r, ORTEP_REQUEST_FAILED);
}

/* The slot drew `token` (the prompt's last row, or the token fed): stop
 * there (EOS, a stop token: not emitted), or emit it and stop after it
 * (max_tokens, the callback, a full slot), or go on decoding from it. */
static void drew(ortep_batch *b, slot *s, int32_t token) {
  request *r = s->r;
  bool eos = !r->o.ignore_eos && ortep__in_ids(token, b->p.config->eos_token_ids, b->p.config->n_eos_token_ids);
  if (eos || ortep__in_ids(token, r->o.stop_tokens, r->o.n_stop_tokens)) {
    r->result.reason = eos ? ORTEP_STOP_EOS : ORTEP_STOP_STOP_TOKEN;
    r->result.stop_token = token;
    end_request(b, r, ORTEP_REQUEST_DONE);
    return;
  }
  size_t i = r->result.generated++;
  s->gen[i] = token;
  s->next = token;
  r->state = ORTEP_REQUEST_DECODING;
  b->st.generated++;
  bool go = true;
  if (r->cb) {
    ortep_batch_event e = {ORTEP_BATCH_TOKEN, r->id, token, i, r->result, ORTEP_OK, NULL};
    b->in_callback = true;
    go = r->cb(&e, r->user);
    b->in_callback = false;
  }
  if (!go)
    r->result.reason = ORTEP_STOP_CALLBACK;
  else if (r->o.max_tokens && r->result.generated >= r->o.max_tokens)
    r->result.reason = ORTEP_STOP_MAX_TOKENS;
  else if (s->pos >= b->capacity)
    r->result.reason = ORTEP_STOP_CACHE_FULL; /* nowhere to run the token it emitted */
  else
    return;
  end_request(b, r, ORTEP_REQUEST_DONE);
}

/* --- open / close ------------------------------------------------------------ */
void ortep_batch_close(ortep_batch *b) {
  if (!b) return;
  for (size_t i = 0; i < b->n_reqs; i++) free_request(b->reqs[i]);
  ortep__free(b->reqs);
  for (size_t i = 0; b->slots && i < b->n_slots; i++) {
    ortep__free(b->slots[i].ids);
    ortep__free(b->slots[i].gen);
  }
  ortep__free(b->slots);
  ortep__free(b->params);
  ortep__free(b->row_tok), ortep__free(b->row_pos), ortep__free(b->row_slot), ortep__free(b->result);
  ortep__free(b->chunk_pos), ortep__free(b->chunk_slot), ortep__free(b->row_slot_of);
  ortep_decoder_close(b->d);
  ortep__free(b);
}

static ortep_status write_params(ortep_batch *b) {
  if (!b->params_dirty) return ORTEP_OK;
  ortep_status st =
      ortep_session_write(b->p.session, ORTEP_INPUT_SAMPLE_PARAMS, b->params, b->n_slots * sizeof *b->params);
  if (st == ORTEP_OK) b->params_dirty = false;
  return st;
}

ortep_status ortep_batch_open(const char *model, const ortep_batch_options *options, ortep_batch **out) {
  if (!out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_open: out is NULL");
  *out = NULL;
  if (!model) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_open: the model is NULL");
  ortep_batch_options o = options ? *options : (ortep_batch_options){0};
  size_t slots = o.slots ? o.slots : DEFAULT_SLOTS;
  if (slots > MAX_SLOTS)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_open: %zu slots; use 1 to %d (0: %d)", slots, MAX_SLOTS,
                       DEFAULT_SLOTS);
  const char *ep = o.decoder.ep ? o.decoder.ep : "auto";
  if (!strcmp(ep, "cuda"))
    return ortep__fail(ORTEP_E_NOT_SUPPORTED,
                       "ortep_batch_open: ep \"cuda\": batched decoding runs on the CPU EP only for now (the CUDA EP "
                       "has no slot-aware attention and selection kernels yet); use ep \"cpu\" or \"auto\"");
  if (strcmp(ep, "auto") && strcmp(ep, "cpu"))
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_open: unknown EP '%s'; choose auto or cpu", ep);
  o.decoder.ep = "cpu";
  ortep_batch *b = ortep__calloc(1, sizeof *b);
  if (!b) return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the batch");
  atomic_flag_clear(&b->busy);
  b->n_slots = slots;
  b->next_id = 1;
  b->share = !o.disable_prefix_sharing;
  ortep_status st = ortep__decoder_open_slots(model, &o.decoder, slots, &b->d);
  if (st == ORTEP_OK) {
    ortep__decoder_get_parts(b->d, &b->p);
    b->capacity = b->p.capacity;
    b->smallest_chunk = b->p.n_graphs > b->p.n_seq_graphs ? b->p.tokens[b->p.n_graphs - 1] : 0;
    size_t largest = b->p.n_graphs > b->p.n_seq_graphs ? b->p.tokens[b->p.n_seq_graphs] : 1;
    b->budget = o.prefill_budget ? o.prefill_budget : largest;
    b->slots = ortep__calloc(slots, sizeof *b->slots);
    b->params = ortep__calloc(slots, sizeof *b->params);
    b->row_tok = ortep__calloc(slots, sizeof *b->row_tok);
    b->row_pos = ortep__calloc(slots, sizeof *b->row_pos);
    b->row_slot = ortep__calloc(slots, sizeof *b->row_slot);
    b->row_slot_of = ortep__calloc(slots, sizeof *b->row_slot_of);
    b->result = ortep__calloc(2 * slots, sizeof *b->result);
    b->chunk_pos = ortep__calloc(largest, sizeof *b->chunk_pos);
    b->chunk_slot = ortep__calloc(largest, sizeof *b->chunk_slot);
    if (!b->slots || !b->params || !b->row_tok || !b->row_pos || !b->row_slot || !b->row_slot_of || !b->result ||
        !b->chunk_pos || !b->chunk_slot)
      st = ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the batch's %zu slots", slots);
  }
  for (size_t i = 0; st == ORTEP_OK && i < slots; i++) {
    b->slots[i].ids = ortep__malloc(b->capacity * sizeof *b->slots[i].ids);
    b->slots[i].gen = ortep__malloc(b->capacity * sizeof *b->slots[i].gen);
    if (!b->slots[i].ids || !b->slots[i].gen)
      st =
          ortep__fail(ORTEP_E_OUT_OF_MEMORY, "no memory for the ids of %zu slots of %zu positions", slots, b->capacity);
  }
  b->params_dirty = true;
  if (st == ORTEP_OK) st = write_params(b); /* greedy everywhere */
  if (st != ORTEP_OK) {
    ortep_batch_close(b);
    return st;
  }
  b->st.slots = slots, b->st.capacity = b->capacity;
  *out = b;
  return ORTEP_OK;
}

/* --- the guard ---------------------------------------------------------------- */
static ortep_status enter(ortep_batch *b, const char *what) {
  if (b->in_callback)
    return ortep__fail(ORTEP_E_STATE, "%s: called from a batch callback, which may only add requests", what);
  if (atomic_flag_test_and_set_explicit(&b->busy, memory_order_acquire))
    return ortep__fail(ORTEP_E_STATE,
                       "%s: the batch is in use by another call right now; a batch serves one thread at a time", what);
  return ORTEP_OK;
}
static ortep_status leave(ortep_batch *b, ortep_status st) {
  atomic_flag_clear_explicit(&b->busy, memory_order_release);
  return st;
}

/* --- adding ------------------------------------------------------------------- */
static ortep_status add(ortep_batch *b, const int32_t *prompt, size_t n, const ortep_generate_options *options,
                        ortep_batch_callback cb, void *user, ortep_request_id *id) {
  ortep_generate_options o = options ? *options : (ortep_generate_options){0};
  if (!prompt || n == 0)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_add: the prompt is %s", prompt ? "empty" : "NULL");
  if (n >= b->capacity)
    return ortep__fail(ORTEP_E_OUT_OF_RANGE,
                       "ortep_batch_add: a prompt of %zu tokens does not fit a slot's context of %zu positions with "
                       "room to generate; shorten it or open the batch with a larger max_seq_len",
                       n, b->capacity);
  if (o.n_stop_tokens && !o.stop_tokens)
    return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_add: %zu stop tokens but the list is NULL",
                       o.n_stop_tokens);
  bool sampling;
  ortep_sample_params sp;
  ortep_status st = ortep__sampling_params(o.sampling, &sampling, &sp);
  if (st != ORTEP_OK) return ortep__wrap(st, "ortep_batch_add");
  request *r = ortep__calloc(1, sizeof *r);
  int32_t *copy = ortep__malloc(n * sizeof *copy), *stops = NULL;
  if (o.n_stop_tokens) stops = ortep__malloc(o.n_stop_tokens * sizeof *stops);
  if (!r || !copy || (o.n_stop_tokens && !stops) || !ORTEP__GROW(b->reqs, b->cap_reqs, b->n_reqs + 1)) {
    ortep__free(r), ortep__free(copy), ortep__free(stops);
    return ortep__fail(ORTEP_E_OUT_OF_MEMORY, "ortep_batch_add: no memory for a request of %zu tokens", n);
  }
  memcpy(copy, prompt, n * sizeof *copy);
  if (stops) memcpy(stops, o.stop_tokens, o.n_stop_tokens * sizeof *stops);
  o.stop_tokens = stops;
  o.sampling = NULL; /* turned into sp */
  *r = (request){.id = b->next_id++,
                 .state = ORTEP_REQUEST_WAITING,
                 .prompt = copy,
                 .n = n,
                 .o = o,
                 .sampling = sampling,
                 .sp = sp,
                 .cb = cb,
                 .user = user,
                 .slot = (size_t)-1,
                 .result = {0, ORTEP_STOP_MAX_TOKENS, -1}};
  b->reqs[b->n_reqs++] = r;
  if (b->wait_tail)
    b->wait_tail->next_waiting = r;
  else
    b->wait_head = r;
  b->wait_tail = r;
  b->st.waiting++;
  if (id) *id = r->id;
  return ORTEP_OK;
}

ortep_status ortep_batch_add(ortep_batch *b, const int32_t *prompt, size_t n, const ortep_generate_options *options,
                             ortep_batch_callback cb, void *user, ortep_request_id *id) {
  if (id) *id = 0;
  if (!b) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_add: batch is NULL");
  if (b->in_callback) return add(b, prompt, n, options, cb, user, id); /* the stepping thread, inside the step */
  ortep_status st = enter(b, "ortep_batch_add");
  return st != ORTEP_OK ? st : leave(b, add(b, prompt, n, options, cb, user, id));
}

/* --- a step --------------------------------------------------------------------- */
/* Waiting requests into free slots, first come first served. */
static void admit(ortep_batch *b) {
  for (size_t i = 0; i < b->n_slots && b->wait_head; i++) {
    slot *s = &b->slots[i];
    if (s->r) continue;
    request *r = b->wait_head;
    b->wait_head = r->next_waiting;
    if (!b->wait_head) b->wait_tail = NULL;
    r->next_waiting = NULL;
    b->st.waiting--, b->st.running++;
    *s = (slot){r, 0, 0, 0, s->ids, s->gen};
    r->slot = i;
    r->state = ORTEP_REQUEST_PREFILLING;
    ortep_sample_params want = r->sampling ? r->sp : (ortep_sample_params){0};
    if (memcmp(&b->params[i], &want, sizeof want)) b->params[i] = want, b->params_dirty = true;
  }
}

/* What the device said about a request's rows, as a message. */
static void device_failure(ortep_batch *b, request *r, uint32_t bits, size_t first, size_t count) {
  char desc[384], bad[160] = "";
  ortep_error_word_describe(bits, desc, sizeof desc);
  slot *s = &b->slots[r->slot];
  for (size_t k = first; k < first + count; k++)
    if (s->ids[k] < 0 || (size_t)s->ids[k] >= b->p.vocab) {
      snprintf(bad, sizeof bad, "; token %d at position %zu is outside the vocabulary of %zu", s->ids[k], k,
               b->p.vocab);
      break;
    }
  if (!bad[0]) snprintf(bad, sizeof bad, "; token %d at position %zu", s->ids[first + count - 1], first + count - 1);
  size_t slot_index = r->slot;
  fail_request(b, r, ORTEP_E_DEVICE_VALIDATION,
               "request %llu (slot %zu): the step over positions %zu..%zu failed: the device error word is 0x%x: "
               "%s%s; the request ended, the others go on",
               (unsigned long long)r->id, slot_index, first, first + count - 1, bits, desc, bad);
}

/* The plan of a prompt of n tokens (the decoder's): at `at`, the largest
 * chunk that fits, greedily; below the smallest chunk, one token a row;
 * past the prompt, one row a step (the tokens generated). */
static size_t plan_step(const ortep_batch *b, size_t n, size_t at) {
  if (at >= n || !b->smallest_chunk || n - at < b->smallest_chunk) return 1;
  size_t g = b->p.n_seq_graphs;
  while (g < b->p.n_graphs && b->p.tokens[g] > n - at) g++;
  return b->p.tokens[g];
}

/* Slot si's row of the sampler's token history: ids at positions [0, n). */
static ortep_status write_history(ortep_batch *b, size_t si, const int32_t *ids, size_t n) {
  ortep_ep *ep;
  void *ptr;
  size_t bytes;
  ortep_buffer h;
  ortep_status st = ortep_session_value(b->p.session, ORTEP_INPUT_HISTORY, &ep, &ptr, &bytes);
  if (st == ORTEP_OK)
    st = ortep_buffer_wrap_borrowed_mut((char *)ptr + si * (bytes / b->n_slots), ortep_ep_device(ep), n * sizeof *ids,
                                        1, &h);
  return st == ORTEP_OK ? ortep_ep_copy_from_host(ep, ids, n * sizeof *ids, &h) : st;
}

/* How many of r's first positions slot o computes as r would alone: the
 * same tokens, cut into the same chunks by both plans, short of r's last
 * prompt token (whose logits draw its first token). ran: what o holds
 * already; else what o will hold once its prompt ran. */
static size_t same_way(const ortep_batch *b, const request *r, const slot *o, bool ran) {
  const int32_t *ids = ran ? o->ids : o->r->prompt;
  size_t have = ran ? o->pos : o->r->n, same = 0, limit = have < r->n - 1 ? have : r->n - 1;
  while (same < limit && ids[same] == r->prompt[same]) same++;
  size_t at = 0;
  for (size_t t; at < same && (t = plan_step(b, r->n, at)) == plan_step(b, o->r->n, at) && at + t <= same;) at += t;
  return at;
}

/* A slot about to run its prompt takes the positions another slot has run
 * the same way (same_way): those positions' KV is then bitwise what the
 * request would compute itself (the same graphs over the same tokens and
 * the same earlier KV), so its tokens stay those of the request alone.
 * While a slot that has started its prompt is still computing more of
 * them, it waits for it instead (returns true): running them itself would
 * only compute them twice. A slot that has started never waits, so no two
 * wait for each other. Sharing is an economy: when it fails (memory), the
 * slot runs the whole prompt instead. */
static bool take_prefix(ortep_batch *b, size_t si) {
  slot *s = &b->slots[si];
  request *r = s->r;
  size_t best = 0, donor = 0;
  bool wait = false;
  for (size_t j = 0; j < b->n_slots; j++) {
    const slot *o = &b->slots[j];
    if (j == si || !o->r || !o->pos) continue;
    size_t at = same_way(b, r, o, true);
    if (at > best) best = at, donor = j;
    wait |= o->r->state == ORTEP_REQUEST_PREFILLING && same_way(b, r, o, false) > at;
  }
  if (wait) return true;
  if (!best) return false;
  ortep_status st = ortep__kv_share_slot(b->p.kv, donor, si, best);
  if (st == ORTEP_OK) st = write_history(b, si, r->prompt, best);
  if (st != ORTEP_OK) {
    ortep_clear_error();
    if (ortep__kv_drop_slot(b->p.kv, si, 0) != ORTEP_OK) ortep_clear_error(); /* its pages stay for the next */
    return false;
  }
  memcpy(s->ids, r->prompt, best * sizeof *s->ids);
  s->pos = s->fed = best;
  b->st.shared_tokens += best;
  return false;
}

/* Chunks of one slot's prompt (the decoder's plan), within what is left of
 * the step's budget (at least one chunk, so a long prompt always moves),
 * each chunk's (token, word) read after it: a chunk's word holds what that
 * chunk's own rows latched (kernels/cpu/kernels.c, run_select_slots), so a
 * bad id in any chunk fails its request, not only one in the last. */
static ortep_status prefill_slot(ortep_batch *b, size_t si, size_t *budget) {
  slot *s = &b->slots[si];
  request *r = s->r;
  size_t ran = 0;
  int32_t pair[2] = {0, 0};
  ortep_status st = ORTEP_OK;
  while (r->n - s->fed >= b->smallest_chunk && b->smallest_chunk) {
    size_t t = plan_step(b, r->n, s->fed), g = b->p.n_seq_graphs;
    while (b->p.tokens[g] != t) g++;
    if (ran && t > *budget) break;
    if ((st = write_params(b)) != ORTEP_OK || (st = ortep__decoder_hold_slot(b->d, si, s->pos + t)) != ORTEP_OK) break;
    for (size_t i = 0; i < t; i++) b->chunk_pos[i] = (int32_t)(s->pos + i), b->chunk_slot[i] = (int32_t)si;
    memcpy(s->ids + s->pos, r->prompt + s->fed, t * sizeof *s->ids);
    const ortep__llama_names *nm = &b->p.names[g];
    st = ortep_session_write(b->p.session, nm->tokens, r->prompt + s->fed, t * sizeof(int32_t));
    if (st == ORTEP_OK) st = ortep_session_write(b->p.session, nm->positions, b->chunk_pos, t * sizeof(int32_t));
    if (st == ORTEP_OK) st = ortep_session_write(b->p.session, nm->slots, b->chunk_slot, t * sizeof(int32_t));
    if (st == ORTEP_OK) st = ortep_session_run_graph(b->p.session, g);
    if (st == ORTEP_OK) st = ortep_session_read(b->p.session, nm->result, pair, sizeof pair);
    if (st != ORTEP_OK) break;
    b->st.prefill_chunks++, b->st.prefill_tokens += t;
    if (pair[1]) {
      device_failure(b, r, (uint32_t)pair[1], s->pos, t);
      return ortep__decoder_clear_error_words(b->d);
    }
    s->fed += t, s->pos += t, ran += t;
    *budget = *budget > t ? *budget - t : 0;
  }
  if (st != ORTEP_OK) { /* memory for the slot's KV (the budget), or the session: this request cannot go on */
    char why[384];
    snprintf(why, sizeof why, "%s", ortep_last_error());
    fail_request(b, r, st, "request %llu (slot %zu): its prefill stopped at position %zu: %s",
                 (unsigned long long)r->id, si, s->pos, why);
    return ORTEP_OK;
  }
  if (ran && s->fed == r->n) drew(b, s, pair[0]); /* the prompt ended on a chunk: its draw is the first token */
  return ORTEP_OK;
}

/* One decode step over every slot with a token to run: the token it emitted
 * last, or its prompt's last token. */
static ortep_status decode_rows(ortep_batch *b) {
  size_t rows = 0;
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; i < b->n_slots; i++) {
    slot *s = &b->slots[i];
    request *r = s->r;
    if (!r) continue;
    /* what is left of a prompt below the smallest chunk runs token by token, as a row */
    bool tail = r->state == ORTEP_REQUEST_PREFILLING && (!b->smallest_chunk || r->n - s->fed < b->smallest_chunk);
    if (r->state != ORTEP_REQUEST_DECODING && !tail) continue;
    if ((st = ortep__decoder_hold_slot(b->d, i, s->pos + 1)) != ORTEP_OK) {
      char why[384];
      snprintf(why, sizeof why, "%s", ortep_last_error());
      fail_request(b, r, st, "request %llu (slot %zu): no memory for position %zu: %s", (unsigned long long)r->id, i,
                   s->pos, why);
      continue;
    }
    int32_t token = tail ? r->prompt[s->fed] : s->next;
    s->ids[s->pos] = token;
    b->row_tok[rows] = token, b->row_pos[rows] = (int32_t)s->pos, b->row_slot[rows] = (int32_t)i;
    b->row_slot_of[rows] = i;
    rows++;
  }
  if (!rows) return ORTEP_OK;
  size_t g = 0;
  while (b->p.tokens[g] < rows) g++; /* the bucket: the last one holds every slot */
  size_t bucket = b->p.tokens[g];
  for (size_t i = rows; i < bucket; i++) b->row_tok[i] = 0, b->row_pos[i] = 0, b->row_slot[i] = -1;
  const ortep__llama_names *nm = &b->p.names[g];
  st = write_params(b);
  if (st == ORTEP_OK) st = ortep_session_write(b->p.session, nm->tokens, b->row_tok, bucket * sizeof(int32_t));
  if (st == ORTEP_OK) st = ortep_session_write(b->p.session, nm->positions, b->row_pos, bucket * sizeof(int32_t));
  if (st == ORTEP_OK) st = ortep_session_write(b->p.session, nm->slots, b->row_slot, bucket * sizeof(int32_t));
  if (st == ORTEP_OK) st = ortep_session_run_graph(b->p.session, g);
  if (st == ORTEP_OK) st = ortep_session_read(b->p.session, nm->result, b->result, 2 * bucket * sizeof(int32_t));
  if (st != ORTEP_OK) return st;
  b->st.decode_steps++, b->st.decode_rows += rows, b->st.padded_rows += bucket - rows;
  bool clear = false;
  for (size_t row = 0; row < rows; row++) {
    slot *s = &b->slots[b->row_slot_of[row]];
    request *r = s->r;
    uint32_t bits = (uint32_t)b->result[2 * row + 1];
    if (bits) {
      device_failure(b, r, bits, s->pos, 1);
      clear = true;
      continue;
    }
    if (r->state == ORTEP_REQUEST_PREFILLING) s->fed++;
    s->pos++;
    if (r->state == ORTEP_REQUEST_PREFILLING && s->fed < r->n) continue; /* more of the prompt: its draw unused */
    drew(b, s, b->result[2 * row]);
  }
  return clear ? ortep__decoder_clear_error_words(b->d) : ORTEP_OK;
}

static ortep_status step(ortep_batch *b) {
  b->st.steps++;
  admit(b);
  size_t budget = b->budget;
  ortep_status st = ORTEP_OK;
  for (size_t i = 0; st == ORTEP_OK && i < b->n_slots; i++) {
    slot *s = &b->slots[i];
    if (!s->r || s->r->state != ORTEP_REQUEST_PREFILLING) continue;
    if (b->share && s->pos == 0 && take_prefix(b, i)) continue; /* after the slots before it ran this step's chunks */
    if (b->smallest_chunk && s->r->n - s->fed >= b->smallest_chunk && budget) st = prefill_slot(b, i, &budget);
  }
  if (st == ORTEP_OK) st = decode_rows(b);
  return st;
}

ortep_status ortep_batch_step(ortep_batch *b, size_t *active) {
  if (active) *active = 0;
  if (!b) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_step: batch is NULL");
  ortep_status st = enter(b, "ortep_batch_step");
  if (st != ORTEP_OK) return st;
  st = step(b);
  if (active) *active = b->st.running + b->st.waiting;
  return leave(b, st);
}

ortep_status ortep_batch_run(ortep_batch *b) {
  if (!b) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_run: batch is NULL");
  ortep_status st = enter(b, "ortep_batch_run");
  if (st != ORTEP_OK) return st;
  while (st == ORTEP_OK && b->st.running + b->st.waiting) st = step(b);
  return leave(b, st);
}

/* --- asking ------------------------------------------------------------------------ */
ortep_status ortep_batch_cancel(ortep_batch *b, ortep_request_id id) {
  if (!b) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_cancel: batch is NULL");
  ortep_status st = enter(b, "ortep_batch_cancel");
  if (st != ORTEP_OK) return st;
  request *r;
  if ((st = lookup(b, id, "ortep_batch_cancel", &r)) != ORTEP_OK) return leave(b, st);
  if (r->state >= ORTEP_REQUEST_DONE)
    return leave(
        b, ortep__fail(ORTEP_E_STATE, "ortep_batch_cancel: request %llu has ended already", (unsigned long long)id));
  if (r->state == ORTEP_REQUEST_WAITING) {
    request **p = &b->wait_head, *prev = NULL;
    while (*p != r) prev = *p, p = &(*p)->next_waiting;
    *p = r->next_waiting;
    if (b->wait_tail == r) b->wait_tail = prev;
    b->st.waiting--;
    r->state = ORTEP_REQUEST_CANCELLED;
  } else {
    end_request(b, r, ORTEP_REQUEST_CANCELLED);
  }
  if (r->cb) forget(b, r); /* a callback's request is not polled */
  return leave(b, ORTEP_OK);
}

ortep_status ortep_batch_request(const ortep_batch *b, ortep_request_id id, ortep_request_info *out) {
  if (!b || !out) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_request: NULL argument");
  request *r;
  ortep_status st = lookup(b, id, "ortep_batch_request", &r);
  if (st != ORTEP_OK) return st;
  *out = (ortep_request_info){r->state, r->slot, r->n, 0, r->result, r->status, ""};
  if (r->slot != (size_t)-1) out->position = b->slots[r->slot].pos;
  snprintf(out->message, sizeof out->message, "%s", r->message);
  return ORTEP_OK;
}

size_t ortep_batch_tokens(const ortep_batch *b, ortep_request_id id, int32_t *dst, size_t cap) {
  const request *r = b ? find(b, id) : NULL;
  if (!r) return 0;
  const int32_t *src = r->slot != (size_t)-1 ? b->slots[r->slot].gen : r->tokens;
  size_t n = r->result.generated;
  if (dst && src) memcpy(dst, src, (n < cap ? n : cap) * sizeof *dst);
  return n;
}

ortep_status ortep_batch_release(ortep_batch *b, ortep_request_id id) {
  if (!b) return ortep__fail(ORTEP_E_INVALID_ARGUMENT, "ortep_batch_release: batch is NULL");
  ortep_status st = enter(b, "ortep_batch_release");
  if (st != ORTEP_OK) return st;
  request *r;
  if ((st = lookup(b, id, "ortep_batch_release", &r)) != ORTEP_OK) return leave(b, st);
  if (r->state < ORTEP_REQUEST_DONE)
    return leave(b, ortep__fail(ORTEP_E_STATE, "ortep_batch_release: request %llu is still %s; cancel it first",
                                (unsigned long long)id, r->state == ORTEP_REQUEST_WAITING ? "waiting" : "running"));
  forget(b, r);
  return leave(b, ORTEP_OK);
}

void ortep_batch_get_stats(const ortep_batch *b, ortep_batch_stats *out) {
  if (!out) return;
  *out = (ortep_batch_stats){0};
  if (!b) return;
  *out = b->st;
  for (size_t g = 0; g < ortep_session_graph_count(b->p.session); g++) { /* every graph, not graph 0's alone */
    ortep_session_stats ss;
    if (ortep_session_get_graph_stats(b->p.session, g, &ss) == ORTEP_OK) out->captures += ss.captures;
  }
  ortep_decoder_kv_stats(b->d, &out->kv);
}

ortep_ep *ortep_batch_ep(ortep_batch *b) { return b ? b->p.ep : NULL; }
