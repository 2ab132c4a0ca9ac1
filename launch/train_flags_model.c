// train_flags_model.c: the first part of the table of train_flags.c: the model's flags, then the
// data's. The rows are in --help's order, which train_flags_run.c continues.
#include "train_flags_internal.h"

const vt_train_flag vt_train_flags_model[] = {
    // The model: a preset, then the fields it sets and the variants of timm and big_vision.
    {"--model", VT_OPT_STR, IN_TEXT(model), 0, 0, "NAME",
     "model preset: vit-ti16, vit-s16, vit-b16, vit-l16, vit-h14, tiny (applied before the "
     "other flags wherever it stands, so size flags change the preset)", NULL},
    {"--img-size", VT_OPT_INT, IN_OPTIONS(model.img_size), 1, 8192, "PX", "image side in pixels",
     NULL},
    {"--patch-size", VT_OPT_INT, IN_OPTIONS(model.patch_size), 1, 8192, "PX", "patch side", NULL},
    {"--width", VT_OPT_INT, IN_OPTIONS(model.width), 1, 16384, "C", "embedding width", NULL},
    {"--depth", VT_OPT_INT, IN_OPTIONS(model.depth), 1, 1024, "L", "transformer blocks", NULL},
    {"--heads", VT_OPT_INT, IN_OPTIONS(model.heads), 1, 1024, "H", "attention heads", NULL},
    {"--mlp-ratio", VT_OPT_DOUBLE, IN_OPTIONS(model.mlp_ratio), 0.01, 64, "R",
     "MLP hidden width / width", NULL},
    {"--mlp-dim", VT_OPT_INT, IN_OPTIONS(model.mlp_dim), 0, 1 << 20, "F",
     "the MLP's hidden width, in place of width x --mlp-ratio (big_vision's mlp_dim: SigLIP "
     "So400m's 4304 over width 1152); 0: from --mlp-ratio", NULL},
    {"--num-classes", VT_OPT_INT, IN_OPTIONS(model.num_classes), 2, 1000000, "K", "classes", NULL},
    {"--global-pool", VT_OPT_STR, IN_TEXT(pool), 0, 0, "POOL",
     "what the head sees: token (the class token after `norm`, timm's default), avg (the "
     "mean of the patch tokens after `fc_norm`: MAE's fine-tuning head, timm's "
     "global_pool='avg'), gap (the mean of the patch tokens each after `norm`: timm's "
     "global_pool='avg' with fc_norm=False, big_vision's gap head) or map (attention "
     "pooling of every token after `norm` by a learned latent query, then an MLP: timm's "
     "global_pool='map' (attn_pool), big_vision's MAP head, SigLIP)", "token|avg|gap|map"},
    {"--class-token", VT_OPT_INT, IN_TEXT(class_token), 0, 1, "0|1",
     "0: no class token (timm's class_token=False, the *_gap_* ViTs and SigLIP; needs "
     "--global-pool avg, gap or map)", NULL},
    {"--head-init-std", VT_OPT_FLOAT, IN_OPTIONS(model.head_init_std), 0, 1, "S",
     "std of the head weight's truncated normal initialisation, also of a head --init-from "
     "starts fresh (MAE's fine-tuning: 2e-5); 0: timm's 0.02", NULL},
    {"--weight-init", VT_OPT_STR, IN_TEXT(weight_init), 0, 0, "KIND",
     "timm (timm's default: Linear weights truncated normal 0.02, biases 0) or jax (timm's "
     "weight_init='jax', Flax's initialisers as big_vision's: Linear weights Xavier-uniform, "
     "MLP biases normal 1e-6, the head all zero, the patch embedding and pre-logits "
     "LeCun-normal)",
     "timm|jax"},
    {"--layer-scale", VT_OPT_FLOAT, IN_OPTIONS(model.layer_scale), 0, 1e6, "G",
     "LayerScale (timm's init_values; CaiT, DeiT III 1e-6, DINOv2 1e-5): each block scales "
     "its attention and MLP outputs per channel by learned gammas (blocks.i.ls1.gamma, "
     "ls2.gamma) that start at G; 0: off", NULL},
    {"--no-embed-class", VT_OPT_INT, IN_OPTIONS(model.no_embed_class), 0, 1, "0|1",
     "1: pos_embed covers the patch tokens only, not the class and register tokens (timm's "
     "no_embed_class: DeiT III, DINOv2)", NULL},
    {"--reg-tokens", VT_OPT_INT, IN_OPTIONS(model.reg_tokens), 0, 256, "R",
     "register tokens after the class token (timm's reg_tokens, DINOv2 with registers: 4); "
     "mean pooling skips them", NULL},
    {"--qk-norm", VT_OPT_INT, IN_OPTIONS(model.qk_norm), 0, 1, "0|1",
     "1: LayerNorm over each head's queries and keys before attention (timm's qk_norm, "
     "ViT-22B): blocks.i.attn.q_norm and k_norm", NULL},
    {"--qkv-bias", VT_OPT_INT, IN_TEXT(qkv_bias), 0, 1, "0|1",
     "0: the qkv Linear has no bias (timm's qkv_bias=False, ViT-22B)", NULL},
    {"--parallel-blocks", VT_OPT_INT, IN_OPTIONS(model.parallel), 0, 1, "0|1",
     "1: each block adds attention and MLP of one LayerNorm's output, x + attn(n) + mlp(n) "
     "(ViT-22B, timm's ParallelScalingBlock; no norm2, one LayerScale blocks.i.ls.gamma and "
     "one drop path on the sum): one tensor-parallel all-reduce per block each way instead of "
     "two", NULL},
    {"--act", VT_OPT_STR, IN_TEXT(act), 0, 0, "ACT",
     "the MLPs' activation (timm's act_layer): gelu (the exact erf form, timm's and PyTorch's "
     "default), gelu_tanh (the tanh approximation: Flax's default, so the JAX ViTs of "
     "big_vision and SigLIP; cuBLASLt's GELU epilogue) or quick_gelu (x sigmoid(1.702 x): "
     "OpenAI's CLIP towers)", "gelu|gelu_tanh|quick_gelu"},
    {"--pre-logits", VT_OPT_INT, IN_OPTIONS(model.pre_logits), 0, 65536, "R",
     "a pre-logits layer of width R between the pooled features and the head: Linear then "
     "tanh (big_vision's rep_size, the original ViT's representation layer; pre_logits.fc); "
     "0: none", NULL},
    {"--pos-embed", VT_OPT_STR, IN_TEXT(pos_embed), 0, 0, "KIND",
     "learn (timm's learned pos_embed, default) or sincos2d (big_vision's fixed 2D sin-cos "
     "table of \"Better plain ViT baselines\", never trained; positions on the patch tokens "
     "only)", "learn|sincos2d"},
    {"--pre-norm", VT_OPT_INT, IN_OPTIONS(model.pre_norm), 0, 1, "0|1",
     "1: a LayerNorm of the embedding's output before the first block, and no patch "
     "embedding bias (timm's pre_norm, norm_pre: the CLIP image towers, with --norm-eps 1e-5)",
     NULL},
    {"--norm-eps", VT_OPT_FLOAT, IN_OPTIONS(model.norm_eps), 1e-12, 0.1, "E",
     "every LayerNorm's eps: timm's ViT 1e-6, or nn.LayerNorm's 1e-5 (the CLIP image towers, "
     "timm's vit_*_clip_*)", NULL},

    // The data, its loader and its transforms.
    {"--data", VT_OPT_STR, IN_OPTIONS(data), 0, 0, "SOURCE",
     "training data: synthetic (a deterministic, learnable image task), an ImageFolder "
     "directory (root/<class>/<image>), a list file (path<TAB>label per line) or tar shards "
     "in webdataset's layout (KEY.jpg, .png or .webp with KEY.cls, or --label-key's member: a "
     ".tar file, a folder of them or a numbered range 'train-{000..146}.tar')", NULL},
    {"--val-data", VT_OPT_STR, IN_OPTIONS(val_data), 0, 0, "SOURCE",
     "validation data (the same forms, images only: not synthetic), evaluated on the same mesh",
     NULL},
    {"--label-key", VT_OPT_STR, IN_OPTIONS(label_key), 0, 0, "KIND",
     "tar shards: the member that holds a sample's class number, KEY.KIND as decimal text "
     "(timm's and webdataset's cls; e.g. label, target), or json:FIELD for an integer "
     "field of KEY.json (json:A.B: field B of the object in field A)", NULL},
    {"--label-names", VT_OPT_STR, IN_OPTIONS(label_names), 0, 0, "FILE",
     "tar shards: the class names, line c naming class c (or 'c<TAB>name', as vit3d prepare "
     "writes classes.txt): a label member (or JSON field) may then hold a class's name, and "
     "the classes are the file's", NULL},
    {"--index-cache", VT_OPT_STR, IN_OPTIONS(index_cache), 0, 0, "DIR",
     "keep the datasets' indexes in DIR between runs: a start then stats each shard, class "
     "folder or list file instead of listing every image or reading every tar header (for "
     "large datasets on network file systems); an entry is rebuilt when its sources changed "
     "size or time", NULL},
    {"--eval-interval", VT_OPT_INT, IN_OPTIONS(eval_interval), 0, 1 << 30, "N",
     "evaluate every N steps; 0: only after the last step", NULL},
    {"--decode-split", VT_OPT_INT, IN_OPTIONS(decode_split), 0, 1, "0|1",
     "1: the first pipeline stage's TP ranks each decode 1/tp of every micro-batch and "
     "all-gather the images (when tp divides the micro-batch, and with Mixup or CutMix "
     "into even shares); 0: every TP rank decodes the whole micro-batch", NULL},
    {"--check-log", VT_OPT_STR, IN_OPTIONS(check_log), 0, 0, "FILE",
     "compare each step's loss and grad norm (and evaluation figures) with FILE, an earlier "
     "run's metrics.jsonl (after "
     "a resume, on another mesh or machine): the first differences are logged, and the run "
     "ends with exit code 5 if a step differed or none was in FILE", NULL},
    {"--check-tol", VT_OPT_FLOAT, IN_OPTIONS(check_tol), 0, 1, "T",
     "--check-log's relative tolerance; 0: the same figures as metrics.jsonl prints them", NULL},
    {"--loader-threads", VT_OPT_INT, IN_OPTIONS(loader_threads), 0, 1024, "N",
     "image decoder threads per rank that needs pixels; 0: as many as --threads", NULL},
    {"--prefetch", VT_OPT_INT, IN_OPTIONS(prefetch), 1, 1024, "N",
     "ready micro-batches the loader keeps ahead", NULL},
    {"--max-image-pixels", VT_OPT_I64, IN_OPTIONS(max_image_pixels), 1, 1e12, "N",
     "images with more pixels are bad (decompression bombs)", NULL},
    {"--bad-image", VT_OPT_STR, IN_TEXT(bad_image), 0, 0, "POLICY",
     "unreadable or corrupt images: skip (warn and count; training replaces the image by "
     "another of the same class, evaluation leaves it out of its figures and predictions) or "
     "fail (stop the run, saving the steps before the file's)", "skip|fail"},
    {"--crop-scale-min", VT_OPT_FLOAT, IN_OPTIONS(transform.scale_min), 0.001, 1, "F",
     "random-resized crop: smallest fraction of the image area", NULL},
    {"--eval-crop-mode", VT_OPT_STR, IN_TEXT(eval_crop_mode), 0, 0, "MODE",
     "evaluation's resize before the centre crop: center (the shorter side to img-size / "
     "--eval-crop-pct, aspect kept: torchvision's Resize + CenterCrop) or squash (both sides, "
     "aspect not kept: timm's --crop-mode squash; the ViT paper's and big_vision's resize)",
     "center|squash"},
    {"--eval-crop-pct", VT_OPT_DOUBLE, IN_OPTIONS(transform.crop_pct), 0.05, 1, "F",
     "evaluation: resize the shorter side to img-size / F, then centre-crop (1: no zoom, for "
     "images already at img-size)", NULL},
    {"--eval-hflip", VT_OPT_INT, IN_OPTIONS(eval_hflip), 0, 1, "0|1",
     "1: evaluation scores the mean logits of each image and its mirror image (test-time "
     "flip; twice the evaluation cost)", NULL},
    {"--hflip", VT_OPT_FLOAT, IN_OPTIONS(transform.flip_prob), 0, 1, "P",
     "probability of a horizontal flip", NULL},
    {"--mean", VT_OPT_STR, IN_TEXT(mean), 0, 0, "R,G,B",
     "per-channel mean for normalisation (pixels in [0, 1]); none: ImageNet's "
     "0.485,0.456,0.406", NULL},
    {"--std", VT_OPT_STR, IN_TEXT(std), 0, 0, "R,G,B",
     "per-channel standard deviation for normalisation; none: ImageNet's 0.229,0.224,0.225",
     NULL},
    {.flag = NULL},  // the end of this part
};
