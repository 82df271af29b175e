/*
 * model.h: LLaMA / Qwen2 models in the Hugging Face layout. A model is a
 * directory holding config.json (the keys of LlamaForCausalLM and
 * Qwen2ForCausalLM) and model.safetensors (Hugging Face tensor names, each
 * f32, f16 or bf16). Opening a model parses the config with cJSON, maps the
 * weights and checks that every tensor the config implies is present with
 * the right shape; an error names the key or tensor and the problem.
 */
#ifndef ORTEP_MODEL_H
#define ORTEP_MODEL_H

#include "ortep/ep.h"
#include "ortep/gguf.h"
#include "ortep/safetensors.h"

ORTEP_BEGIN_DECLS

#define ORTEP_MAX_EOS_TOKENS 8

typedef enum ortep_arch { ORTEP_ARCH_LLAMA = 0, ORTEP_ARCH_QWEN2 = 1 } ortep_arch;

typedef struct ortep_model_config {
  ortep_arch arch;
  int64_t hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads;
  int64_t vocab_size, max_position_embeddings, head_dim;
  double rms_norm_eps, rope_theta;
  bool tie_word_embeddings;
  bool attention_bias; /* q/k/v biases: Qwen2 has them */
  /* The end-of-sequence ids generation stops at: "eos_token_id" (an int or a
   * list) from generation_config.json when that file sets it, else from
   * config.json; none when neither does. Each is checked < vocab_size. */
  int32_t eos_token_ids[ORTEP_MAX_EOS_TOKENS];
  size_t n_eos_token_ids;
  /* q and k rows in adjacent pairs per head (a llama GGUF: llama.cpp's
   * converter permutes them so): RoPE rotates adjacent pairs, not halves. */
  bool rope_interleaved;
} ortep_model_config;

/* Parses config.json text. Required: hidden_size, intermediate_size,
 * num_hidden_layers, num_attention_heads, vocab_size,
 * max_position_embeddings, rms_norm_eps, and model_type ("llama" or "qwen2")
 * or architectures. Optional: num_key_value_heads (= heads), rope_theta
 * (10000), tie_word_embeddings (false), attention_bias (Qwen2: true),
 * head_dim (hidden / heads), eos_token_id (an int or a list of at most
 * ORTEP_MAX_EOS_TOKENS). rope_scaling is refused. */
ORTEP_API ortep_status ortep_model_config_parse(const char *json, size_t len, ortep_model_config *out);

/* Reads dir/config.json (and generation_config.json's eos_token_id) without
 * opening the weights: what a program needs to size a request before it
 * opens a decoder. A path that is not a directory is refused saying what it
 * is. */
ORTEP_API ortep_status ortep_model_config_read(const char *dir, ortep_model_config *out);

typedef struct ortep_model ortep_model;
/* Opens dir (config.json + model.safetensors), or a .gguf file (gguf.h:
 * architecture llama or qwen2, the config from its metadata), with the
 * weights mapped (ORTEP_WEIGHTS_MAP). */
ORTEP_API ortep_status ortep_model_open(const char *dir, ortep_model **out);

/* How the weights get into memory. MAP (default): the file is mapped and
 * used in place, zero-copy; if another process truncates the file while it
 * is open, the next read of a vanished page raises SIGBUS (as with every
 * mmap-based loader). READ: the file is read once into host memory from
 * `host` (an initialised host EP: the allocation is charged to its governor
 * and refused by its budget), so later changes to the file cannot harm the
 * process, at the price of a copy of the weights in memory. */
typedef enum ortep_weights_mode { ORTEP_WEIGHTS_MAP = 0, ORTEP_WEIGHTS_READ = 1 } ortep_weights_mode;
typedef struct ortep_model_options {
  ortep_weights_mode weights;
  ortep_ep *host; /* READ: allocates the copy; must outlive the model */
} ortep_model_options;
ORTEP_API ortep_status ortep_model_open_with(const char *dir, const ortep_model_options *options, ortep_model **out);
ORTEP_API void ortep_model_close(ortep_model *model);
ORTEP_API const ortep_model_config *ortep_model_get_config(const ortep_model *model);
/* A weight by its Hugging Face name (NULL when absent), as in the file. (An
 * EP may hold its own form of a weight while a session runs it: the CPU EP's
 * blocked or quantized projections, ortep.weights_layout and
 * ortep.weights_dtype.) */
ORTEP_API const ortep_safetensors_entry *ortep_model_tensor(const ortep_model *model, const char *name);
/* The model as a GGUF file, as llama.cpp's convert_hf_to_gguf.py writes one:
 * its metadata keys and tensor names, dimensions innermost first, a llama
 * model's q/k rows permuted for ggml's RoPE; the weights as stored
 * (dtype NULL or "stored"), or "q8_0" / "q4_0": the 2-D weights quantized
 * by ortep_quantize (the embedding and lm_head q8_0 either way), 1-D ones as
 * stored. No tokenizer metadata. For tests and presets: a GGUF and the
 * directory it came from decode the same tokens. */
ORTEP_API ortep_status ortep_model_write_gguf(const ortep_model *model, const char *path, const char *dtype);
/* The same into a writer the caller completes (e.g. with
 * ortep_tokenizer_add_to_gguf) and writes. */
ORTEP_API ortep_status ortep_model_add_to_gguf(const ortep_model *model, ortep_gguf_writer *writer, const char *dtype);
/* The bytes of every weight. */
ORTEP_API size_t ortep_model_weight_bytes(const ortep_model *model);

/* Writes a synthetic model (deterministic pseudo-random weights from seed,
 * scaled so activations stay finite) into dir (created if missing). Presets:
 *   "tiny"          Qwen2-style, hidden 64, 2 layers, 4 heads / 2 KV heads,
 *                   vocab 512, tied embeddings, q/k/v biases (a fast CPU default)
 *   "tiny-llama"    LLaMA-style, hidden 64, 2 layers, 4 heads / 1 KV head,
 *                   vocab 384, untied lm_head, no biases
 *   "tiny-wide-heads" LLaMA-style like tiny-llama with 2 KV heads and head_dim
 *                   24, not hidden / heads = 16 (config.json says head_dim)
 *   "small"         Qwen2-style, hidden 256, 4 layers, 8 heads / 2 KV heads,
 *                   intermediate 704, vocab 2048, tied, biases (a model whose
 *                   nodes are big enough to run on several CPU workers)
 *   "qwen2.5-0.5b"  the exact shapes of Qwen2.5-0.5B: hidden 896, 24 layers,
 *                   14 heads / 2 KV heads, intermediate 4864, vocab 151936,
 *                   tied embeddings, q/k/v biases
 * dtype: f32, f16 or bf16. Also writes tokenizer.json: a byte-level BPE with
 * the preset's vocabulary size (meaningless as language, valid as BPE). */
ORTEP_API ortep_status ortep_model_write_synthetic(const char *dir, const char *preset, ortep_dtype dtype,
                                                   uint64_t seed);
/* The cached copy of a preset (seed 0x5eed) in
 * ${XDG_CACHE_HOME:-$HOME/.cache}/ortep/models/<preset>-<dtype>, written on
 * first use (*written says whether it was, may be NULL); dir receives the
 * directory. Every preset comes with a tokenizer.json (a byte-level BPE of
 * its vocabulary size; the last id is the special <|endoftext|>). */
ORTEP_API ortep_status ortep_model_synthetic_cached(const char *preset, ortep_dtype dtype, char *dir, size_t len,
                                                    bool *written);

ORTEP_END_DECLS

#endif
