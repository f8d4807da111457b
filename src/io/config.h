/* The model configuration (MODEL.md §1): every field of §1.1, read from config.json in either
 * spelling (HF `text_config` or flat `inference/config.json`), validated by the rules of §1.2, and
 * the derived per-layer role table.  Everything downstream sizes itself from this struct; nothing
 * may assume V4.1-Flash's 40 layers or 5120 width. */
#ifndef DS_IO_CONFIG_H
#define DS_IO_CONFIG_H
#include "base/common.h"

#define DS_MAX_LAYERS 128        /* backbone + draft stages */
#define DS_MAX_LIST   64         /* kv/index source lists, engram layers, dspark targets */
#define DS_MAX_NGRAM  8

typedef enum { DS_ROLE_SWA = 0, DS_ROLE_FULL, DS_ROLE_REINDEX, DS_ROLE_REUSE } ds_role;
/* CHECKPOINT.md §13 / §14; NONE = no quantization_config (a plain BF16/F32 source checkpoint). */
typedef enum { DS_FMT_W4A8 = 0, DS_FMT_FP8 = 1, DS_FMT_NONE = 2 } ds_ckpt_format;
typedef enum { DS_SCORE_SQRTSOFTPLUS = 0, DS_SCORE_SOFTMAX, DS_SCORE_SIGMOID } ds_score_func;

typedef struct ds_layer_role {
    int ratio;            /* compress ratio r(l): 0, 1, 2, ... */
    ds_role role;
    int kv_src;           /* -1 for SWA */
    int idx_src;          /* -1 for SWA */
    bool cand_source;     /* l == candidate_source_layer */
    bool uses_candidates; /* l in I and c exists and c < l */
    int engram;           /* index into engram_layer_ids, or -1 */
    int captured;         /* index into dspark_target_layer_ids, or -1 */
} ds_layer_role;

typedef struct ds_config {
    /* sizes */
    int vocab_size;              /* V */
    int dim;                     /* D, hidden size */
    int n_layers;                /* L, backbone layers */
    int n_mtp_layers;            /* S_d, draft stages */
    int n_heads;                 /* H */
    int head_dim;                /* d_h = KV latent dim */
    int rope_head_dim;           /* r_d, rotary tail of each head */
    int q_lora_rank;
    int o_groups;
    int o_lora_rank;
    double norm_eps;             /* 1e-20 */
    int window;                  /* W, sliding window */
    int n_compress;              /* entries in compress_ratios (L + S_d after extension) */
    int compress_ratios[DS_MAX_LAYERS];
    int n_kv_src, kv_src[DS_MAX_LIST];       /* K */
    int n_idx_src, idx_src[DS_MAX_LIST];     /* I */
    int cand_layer;              /* c, -1 = off */
    int cand_topk_blocks;
    int cand_block_size;
    int index_n_heads;
    int index_head_dim;
    int index_topk;
    double rope_theta;           /* SWA table base */
    double compress_rope_theta;  /* CMP table base */
    double rope_factor;          /* YaRN factor */
    int64_t rope_orig_len;       /* YaRN original length (0 = no YaRN) */
    double beta_fast, beta_slow;
    int64_t max_pos;             /* max_position_embeddings */
    int n_experts;               /* E_r */
    int n_active;                /* experts per token */
    int n_shared;                /* must be 1 */
    int moe_inter;               /* expert intermediate size */
    ds_score_func score_func;
    bool norm_topk_prob;
    double route_scale;
    double gate_temp;
    double swiglu_limit;
    int hc_mult;                 /* HC */
    int hc_sinkhorn_iters;
    double hc_eps;
    /* Engram */
    int n_engram, engram_layers[DS_MAX_LIST];
    int64_t engram_rows[DS_MAX_LIST];        /* engram_num_embeddings per Engram layer */
    int n_engram_rows;                       /* entries in engram_num_embeddings (== n_engram) */
    int engram_max_ngram;
    int64_t engram_vocab_size;   /* prime search floor */
    int engram_n_heads;
    int engram_head_dim;
    int engram_pad_id;
    int engram_classes;          /* V_c */
    bool has_engram_multipliers; /* fixture-only key present */
    int64_t engram_multipliers[DS_MAX_LIST][DS_MAX_NGRAM];
    int n_mult_layers, n_mult_per_layer;     /* shape of engram_hash_multipliers as written */
    char engram_token_map_file[256];         /* fixture-only key, "" if absent */
    /* DSpark */
    int dspark_block;
    int dspark_noise_id;
    int n_dspark_targets, dspark_targets[DS_MAX_LIST];
    int dspark_markov_rank;
    int dspark_n_experts;        /* resolved: 0 in file -> n_experts */
    int dspark_n_active;         /* resolved: 0 in file -> n_active */
    bool dspark_draft_random;    /* fixture-only key: the draft has random weights (mkmodel); no probe */
    /* tokens */
    int bos_id, eos_id, pad_id;
    int image_token_id;
    /* format */
    ds_ckpt_format format;
    /* Engram rotation config (CHECKPOINT.md §13); defaults when absent */
    bool engram_gate_original_basis;   /* key_and_gate_basis == "original" */
    bool engram_value_rotated;         /* value_projection_rotated */
    /* vision (may be absent) */
    int vision_layers;           /* 0 = no vision */

    /* derived */
    ds_layer_role roles[DS_MAX_LAYERS];      /* [L + S_d] */
} ds_config;

/* Read config.json (and inference/config.json if present; both must agree) from a model dir, then
 * validate.  Disagreement is E_CONFIG naming the field and both values.  The number format is taken
 * from config.json's quantization_config only (a flat `dtype` is not compared: the flat file of the
 * W4A8 release is inherited from the official one). */
int ds_config_load(const char *model_dir, ds_config *cfg, ds_error *err);
/* Parse one JSON text (either spelling).  `path` is used in error messages.  Does not validate.
 * Unknown quantization_config → E_CONFIG_QUANT; missing/ill-typed fields → E_CONFIG. */
int ds_config_parse(const char *json_text, const char *path, ds_config *cfg, ds_error *err);
/* Apply the §1.2 validation rules and fill cfg->roles.  Errors are E_CONFIG naming the rule. */
int ds_config_validate(ds_config *cfg, const char *path, ds_error *err);
/* Built-in fixture configs (MODEL.md §8): "tiny", "mini".  Returns -1 for an unknown name. */
int ds_config_preset(const char *name, ds_config *cfg);
/* Write cfg as HF-style config.json text (caller frees).  Used by mkmodel.  Engram multipliers
 * are written as exact JSON integers. */
char *ds_config_to_json(const ds_config *cfg);
/* Flat (inference/config.json) spelling of the same fields, for fixtures that test both files. */
char *ds_config_to_flat_json(const ds_config *cfg);
/* True when the model dimensions equal V4.1-Flash's (the release profile of TOOLS.md §2). */
bool ds_config_is_v41_flash(const ds_config *cfg);
/* The V4.1-Flash configuration of MODEL.md §1.1 (used by counts tests and the profile). */
void ds_config_v41_flash(ds_config *cfg);

#endif
