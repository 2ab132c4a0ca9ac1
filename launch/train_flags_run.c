// train_flags_run.c: the second part of the table of train_flags.c: every flag after the data's,
// in --help's order (train_flags_model.c holds the first part).
#include "train_flags_internal.h"

#define BIG 1e9  // the most steps a flag accepts

const vt_train_flag vt_train_flags_run[] = {
    // The batch, the run's length, the optimizer and its schedule.
    {"--micro-batch-size", VT_OPT_INT, IN_OPTIONS(micro_batch), 1, 65536, "B",
     "images per forward/backward pass", NULL},
    {"--global-batch-size", VT_OPT_INT, IN_OPTIONS(global_batch), 0, 1 << 24, "G",
     "images per optimizer step, a multiple of dp x micro-batch (gradient accumulation); "
     "0: dp x micro-batch", NULL},
    {"--steps", VT_OPT_I64, IN_OPTIONS(steps), 1, BIG, "N", "optimizer steps to run", NULL},
    {"--epochs", VT_OPT_FLOAT, IN_TEXT(epochs), 0, 1e6, "E",
     "the run's length in passes over the training set: round(E x images / global batch) "
     "steps, known once the dataset is open (so a recipe fits any copy of its dataset); of "
     "--epochs and --steps the later one counts", NULL},
    {"--warmup-epochs", VT_OPT_FLOAT, IN_TEXT(warmup_epochs), 0, 1e6, "E",
     "the warmup in passes over the training set; of it and --warmup-steps the later one "
     "counts", NULL},
    {"--eval-epochs", VT_OPT_FLOAT, IN_TEXT(eval_epochs), 0, 1e6, "E",
     "evaluate every E passes over the training set (at least every step); of it and "
     "--eval-interval the later one counts", NULL},
    {"--save-epochs", VT_OPT_FLOAT, IN_TEXT(save_epochs), 0, 1e6, "E",
     "save every E passes over the training set; of it and --save-interval the later one "
     "counts", NULL},
    {"--run-steps", VT_OPT_I64, IN_OPTIONS(run_steps), 0, BIG, "N",
     "stop after N steps of this invocation (the schedule still spans --steps; resume later "
     "with --resume); 0: run to the end", NULL},
    {"--opt", VT_OPT_STR, IN_TEXT(opt_name), 0, 0, "NAME",
     "optimizer: adamw (torch.optim.AdamW), lamb (timm's Lamb, DeiT III and large batches: "
     "Adam's direction plus weight decay, scaled per tensor by ||weights|| / ||direction||; "
     "tensors without weight decay take Adam's step), sgd (timm's: torch.optim.SGD with "
     "Nesterov momentum), momentum (SGD with plain momentum: the ViT paper's and "
     "big_vision's fine-tuning; SGD's weight decay is L2, added to the gradient), lars or "
     "nlars (timm's Lars, plain or Nesterov momentum: large batches and linear probes; each "
     "tensor with weight decay steps along its gradient plus weight decay, scaled by 0.001 "
     "||w|| / (||g|| + weight decay ||w|| + eps); the others plain momentum SGD), larc or nlarc "
     "(timm's: LARS with that ratio clipped to min(ratio / lr, 1))",
     "adamw|lamb|sgd|momentum|lars|nlars|larc|nlarc"},
    {"--momentum", VT_OPT_FLOAT, IN_OPTIONS(optim.momentum), 0, 0.9999, "M",
     "SGD's and LARS's momentum (timm's --momentum)", NULL},
    {"--opt-eps", VT_OPT_FLOAT, IN_OPTIONS(optim.eps), 1e-12, 1, "EPS",
     "the optimizer's epsilon (timm's --opt-eps, given: left out, timm takes each optimizer's "
     "own, Lamb's 1e-6, AdamW's 1e-8)", NULL},
    {"--lr", VT_OPT_FLOAT, IN_OPTIONS(optim.lr), 0, 10, "LR", "peak learning rate", NULL},
    {"--min-lr", VT_OPT_FLOAT, IN_OPTIONS(optim.min_lr), 0, 10, "LR",
     "learning rate at the end of the decay (cosine or linear)", NULL},
    {"--warmup-steps", VT_OPT_I64, IN_OPTIONS(optim.warmup_steps), -1, BIG, "N",
     "steps of linear warmup; -1: 5% of --steps", NULL},
    {"--resume-override", VT_OPT_INT, IN_OPTIONS(resume_override), 0, 1, "0|1",
     "1: resume a checkpoint even where this command's learning-rate schedule or optimizer "
     "settings (--lr, --steps, --warmup-steps, --weight-decay, ...) differ from the run that "
     "saved it, training on with this command's (a longer run, a new rate); 0: refuse, "
     "naming the differences", NULL},
    {"--sched", VT_OPT_STR, IN_TEXT(sched), 0, 0, "KIND",
     "the decay after the warmup: cosine (timm's default: a half cosine from --lr to "
     "--min-lr), linear (a straight line from --lr to --min-lr: timm's --sched poly "
     "--decay-rate 1) or constant (--lr to the end)", "cosine|linear|constant"},
    {"--sched-on", VT_OPT_STR, IN_TEXT(sched_on), 0, 0, "UNIT",
     "when the learning rate changes: steps (every step; the cosine from the warmup's end) "
     "or epochs (once per pass over the training set, timm's train.py default: timm's "
     "CosineLRScheduler counted in epochs, the cosine from epoch 0, the warmup from "
     "--warmup-lr; DeiT steps it after each epoch, its rates an epoch later)", "steps|epochs"},
    {"--warmup-lr", VT_OPT_FLOAT, IN_OPTIONS(optim.warmup_lr), 0, 10, "LR",
     "the warmup's learning rate at step 0, rising linearly to --lr (timm's --warmup-lr, "
     "DeiT: 1e-6); 0: step s of W takes lr * (s + 1) / W (with --sched-on epochs, epoch e of "
     "W warmup epochs lr * (e + 1) / W, at most lr)", NULL},
    {"--weight-decay", VT_OPT_FLOAT, IN_OPTIONS(optim.weight_decay), 0, 10, "WD",
     "decoupled weight decay (not on biases, norms, LayerScale, pos_embed, cls_token, "
     "reg_token)", NULL},
    {"--layer-decay", VT_OPT_FLOAT, IN_OPTIONS(optim.layer_decay), 0.01, 1, "D",
     "layer-wise lr decay (BEiT/MAE fine-tuning): block i (from 0) steps with lr * "
     "D^(depth - i), the embeddings with lr * D^(depth + 1), the final norm and head with lr; "
     "1: off", NULL},
    {"--freeze", VT_OPT_STR, IN_OPTIONS(optim.freeze), 0, 0, "REGEX",
     "freeze the tensors whose timm names match REGEX (POSIX extended, unanchored; e.g. "
     "'^(patch_embed|blocks\\.[0-5]\\.)' for the patch embedding and the first six blocks): "
     "they keep their values (no update, no weight decay, not in the gradient norm), as "
     "PyTorch's requires_grad=False; the backward skips a frozen prefix (the embeddings and "
     "the first blocks)", NULL},
    {"--trainable", VT_OPT_STR, IN_OPTIONS(optim.trainable), 0, 0, "REGEX",
     "freeze every tensor whose timm name does not match REGEX (a linear probe: '^head\\.'; "
     "with --freeze, a tensor either one freezes is frozen)", NULL},
    {"--clip-grad", VT_OPT_FLOAT, IN_OPTIONS(optim.clip_grad), 0, 1e6, "NORM",
     "clip gradients to this global norm; 0 turns clipping off", NULL},
    {"--skip-spike-z", VT_OPT_FLOAT, IN_OPTIONS(optim.spike_z), 0, 1e6, "Z",
     "skip a step whose loss or gradient norm lies more than Z standard deviations above its "
     "moving mean (over --spike-window steps; guards from the window's end on), as a "
     "non-finite step is skipped; 0: off", NULL},
    {"--spike-window", VT_OPT_INT, IN_OPTIONS(optim.spike_window), 2, 1 << 20, "N",
     "--skip-spike-z's moving mean and variance span N steps", NULL},

    // The loss, dropout, mixing and augmentation.
    {"--label-smoothing", VT_OPT_FLOAT, IN_OPTIONS(label_smoothing), 0, 0.999, "S",
     "label smoothing of the cross-entropy", NULL},
    {"--bce-loss", VT_OPT_INT, IN_OPTIONS(bce_loss), 0, 1, "0|1",
     "1: train with binary cross-entropy over the classes against the same (smoothed, mixed) "
     "targets, averaged over classes and images (timm's --bce-loss: DeiT III, ResNet strikes "
     "back); evaluation reports the softmax cross-entropy", NULL},
    {"--bce-target-thresh", VT_OPT_FLOAT, IN_OPTIONS(bce_thresh), -1, 0.999, "T",
     "with --bce-loss: targets of 1 where the (smoothed, mixed) target exceeds T, else 0 "
     "(timm's --bce-target-thresh; DeiT III: 0, both images of a mixed pair count fully); "
     "negative: the soft targets", NULL},
    {"--drop-path", VT_OPT_FLOAT, IN_OPTIONS(drop_path), 0, 0.99, "RATE",
     "stochastic depth as timm's drop_path_rate: block i of D drops each residual branch per "
     "image with probability RATE * i / (D - 1), keyed by the image's stream position", NULL},
    {"--drop-path-uniform", VT_OPT_INT, IN_OPTIONS(drop_path_uniform), 0, 1, "0|1",
     "1: every block drops at --drop-path's RATE (DeiT III's and CaiT's models_v2: "
     "[drop_path_rate] * depth), not the ramp from 0", NULL},
    {"--proj-drop", VT_OPT_FLOAT, IN_OPTIONS(proj_drop), 0, 0.99, "P",
     "dropout as timm's proj_drop_rate: each element of every block's attention output, MLP "
     "hidden units and MLP output dropped with probability P (the rest scaled by 1 / (1 - P)), "
     "keyed by the image's stream position, token and channel (the original ViT, AugReg's "
     "regularised settings: 0.1 with --pos-drop 0.1); parallel blocks drop their MLP's hidden "
     "units only (timm's ParallelScalingBlock)", NULL},
    {"--attn-drop", VT_OPT_FLOAT, IN_OPTIONS(attn_drop), 0, 0.99, "P",
     "dropout as timm's attn_drop_rate: each attention probability (image, head, query, key) "
     "of every block dropped with probability P after the softmax, the rest scaled by "
     "1 / (1 - P), keyed by the image's stream position, head, query and key (drawn again in "
     "the backward, not stored); not in the MAP head's pooling (nor is it in timm's)", NULL},
    {"--pos-drop", VT_OPT_FLOAT, IN_OPTIONS(pos_drop), 0, 0.99, "P",
     "dropout as timm's pos_drop_rate: each element of the embedding's output (patches, prefix "
     "tokens and positions) dropped with probability P", NULL},
    {"--drop", VT_OPT_FLOAT, IN_OPTIONS(head_drop), 0, 0.99, "P",
     "dropout as timm's --drop (drop_rate): each element of the head's input (the pooled, "
     "normalised features) dropped with probability P", NULL},
    {"--mixup", VT_OPT_FLOAT, IN_OPTIONS(mix.mixup_alpha), 0, 100, "ALPHA",
     "Mixup: blend each pair of images (stream positions 2k, 2k+1) and their targets with "
     "lam ~ Beta(ALPHA, ALPHA) (DeiT: 0.8); 0: off", NULL},
    {"--cutmix", VT_OPT_FLOAT, IN_OPTIONS(mix.cutmix_alpha), 0, 100, "ALPHA",
     "CutMix: swap a box between the images of each pair, lam ~ Beta(ALPHA, ALPHA) (DeiT: 1.0); "
     "0: off", NULL},
    {"--mix-prob", VT_OPT_FLOAT, IN_OPTIONS(mix.prob), 0, 1, "P",
     "probability that a pair is mixed (Mixup or CutMix)", NULL},
    {"--mix-switch-prob", VT_OPT_FLOAT, IN_OPTIONS(mix.switch_prob), 0, 1, "P",
     "with both --mixup and --cutmix: probability of CutMix for a pair", NULL},
    {"--reprob", VT_OPT_FLOAT, IN_OPTIONS(erase.prob), 0, 1, "P",
     "random erasing: with probability P a box of 2% to 1/3 of a training image is filled "
     "(DeiT: 0.25); 0: off", NULL},
    {"--remode", VT_OPT_STR, IN_TEXT(remode), 0, 0, "MODE",
     "random erasing's fill: pixel (a normal value per element), rand (per channel) or const "
     "(zeros)", "pixel|rand|const"},
    {"--aa", VT_OPT_STR, IN_TEXT(aa), 0, 0, "SPEC",
     "RandAugment of the 8-bit training crop, timm's config string (DeiT: "
     "rand-m9-mstd0.5-inc1; keys m, n, mstd, mmax, inc, p; inc0 is off here, where timm's "
     "parser takes any inc as on); empty: off", NULL},
    {"--train-interpolation", VT_OPT_STR, IN_TEXT(train_interp), 0, 0, "MODE",
     "how a training crop becomes the S x S input: sample (bilinear at the output pixels "
     "only, the fastest), or bilinear or bicubic (Pillow's antialiased resize of the crop, as "
     "torchvision's on PIL images; DeiT's and timm's ViT recipes: bicubic)",
     "sample|bilinear|bicubic"},
    {"--eval-interpolation", VT_OPT_STR, IN_TEXT(eval_interp), 0, 0, "MODE",
     "the same for evaluation's resize of the whole image before the centre crop (timm's "
     "ViT models: bicubic)", "sample|bilinear|bicubic"},
    {"--simple-crop", VT_OPT_INT, IN_OPTIONS(transform.simple_crop), 0, 1, "0|1",
     "1: training crops are DeiT III's simple random crop (its --src: the shorter side resized "
     "to --img-size, 4 mirrored pixels of padding, a random square of it, the flip) instead "
     "of the random-resized crop; needs --train-interpolation bilinear or bicubic", NULL},
    {"--jpeg-reduce", VT_OPT_INT, IN_OPTIONS(transform.jpeg_reduce), 0, 1, "0|1",
     "1: a JPEG whose crop is resized to under half its size is decoded at 1/2, 1/4 or 1/8 "
     "(libjpeg's DCT scaling: faster, within a level or two of Pillow's pixels on average); 0: "
     "at full size, so that the bilinear and bicubic resizes give Pillow's and torchvision's "
     "pixels exactly (training and evaluation)", NULL},
    {"--three-augment", VT_OPT_INT, IN_OPTIONS(transform.three_aug), 0, 1, "0|1",
     "1: 3-Augment (DeiT III) of the 8-bit training crop instead of RandAugment: one of "
     "grayscale, solarize (128) and a Gaussian blur (radius 0.1 to 2), then the colour jitter, "
     "as Pillow and torchvision do them", NULL},
    {"--color-jitter", VT_OPT_FLOAT, IN_OPTIONS(transform.color_jitter), 0, 1, "J",
     "colour jitter of training crops: brightness, contrast and saturation factors in [1 - J, "
     "1 + J], in a random order (torchvision's ColorJitter(J, J, J)); 3-Augment's (DeiT III: "
     "0.3), or without --three-augment timm's (its train.py: 0.4; not with --aa), only where "
     "given", NULL},
    {"--aa-interpolation", VT_OPT_STR, IN_TEXT(aa_interp), 0, 0, "MODE",
     "resampling of RandAugment's Rotate, Shear and Translate (DeiT: bicubic)",
     "bicubic|bilinear"},
    {"--aug-repeats", VT_OPT_INT, IN_OPTIONS(aug_repeats), 1, 64, "R",
     "repeated augmentation: an epoch holds 1/R of the images, each R times with its own "
     "augmentation, the copies within 128 R stream positions (DeiT: 3); 1: off", NULL},
    {"--drop-last", VT_OPT_INT, IN_OPTIONS(drop_last), 0, 1, "0|1",
     "1: an epoch is the training set's floor(images / global batch) whole steps, the other "
     "images of its order left out (a different few each epoch), as timm's and DeiT's "
     "training loader (drop_last); 0: the stream runs on into the next epoch's order, a step "
     "may hold the end of one epoch and the start of the next", NULL},

    // Recompute, seed, devices, threads and the mesh.
    {"--recompute-blocks", VT_OPT_INT, IN_OPTIONS(recompute_blocks), 0, 1000000, "N",
     "activation recompute: the first N blocks of each pipeline stage keep only their input and "
     "run their forward again in the backward (the same results, less memory, about a third "
     "more compute for them); N >= the stage's blocks: all", NULL},
    {"--seed", VT_OPT_U64, IN_OPTIONS(seed), 0, 1.8e19, "N",
     "seed of weights and data (same seed, same run)", NULL},
    {"--device", VT_OPT_STR, IN_TEXT(device), 0, 0, "DEV", "cpu or cuda", "cpu|cuda"},
    {"--precision", VT_OPT_STR, IN_TEXT(precision), 0, 0, "P",
     "GEMM precision: bf16 (operands rounded to bfloat16, fp32 sums; LayerNorm, softmax, the "
     "residual stream and its gradient, the parameters' gradients and AdamW's master weights "
     "stay fp32, the activations and input gradients that only feed GEMMs are stored as bf16) "
     "or fp32; default bf16 on cuda, fp32 on cpu", "bf16|fp32"},
    {"--threads", VT_OPT_INT, IN_OPTIONS(threads), 0, 4096, "N",
     "CPU threads per rank for OpenMP and BLAS together; 0: the CPUs the rank may use over "
     "the host's ranks that share them", NULL},
    {"--tp", VT_OPT_INT, IN_OPTIONS(tp), 1, 4096, "N", "tensor-parallel ranks (inside a node)",
     NULL},
    {"--pp", VT_OPT_INT, IN_OPTIONS(pp), 1, 4096, "N", "pipeline stages (across nodes)", NULL},
    {"--dp", VT_OPT_INT, IN_OPTIONS(dp), 0, 1 << 20, "N",
     "data-parallel replicas; 0: world size / (tp * pp)", NULL},
    {"--mesh-order", VT_OPT_STR, IN_OPTIONS(mesh_order), 0, 0, "ORDER",
     "how ranks map to the mesh, innermost axis first", "tp-dp-pp|tp-pp-dp"},
    {"--pp-schedule", VT_OPT_STR, IN_OPTIONS(pp_schedule), 0, 0, "KIND",
     "pipeline schedule: 1f1b, gpipe, interleaved (1F1B over --pp-chunks model chunks per "
     "stage: idle (p-1)/(v*m+p-1) instead of (p-1)/(m+p-1), more activations in flight; "
     "micro-batches per step a multiple of --pp), zb-h1 (zero-bubble 1F1B: backward split "
     "into input and weight gradients, idle about (p-1)/(3m+p-1); no --recompute-blocks) or "
     "zb-v (zero-bubble with two chunks per stage in a V: stage s holds virtual stages s and "
     "2pp-1-s, so stage 0 has the embedding and the head; idle about (p-1)/(6m+p-1) with up "
     "to 2pp chunks' activations in flight on every stage; no --recompute-blocks)",
     "1f1b|gpipe|interleaved|zb-h1|zb-v"},
    {"--pp-pass-times", VT_OPT_STR, IN_OPTIONS(pp_pass_times), 0, 0, "T",
     "zb-v: the forward, input-gradient and weight pass times its order is built for: auto "
     "(measured in the run's second step on every rank, on GPUs by timing events, then the order "
     "rebuilt for them: the same bits, less idle where the passes differ), equal, or F:B:W "
     "(relative, e.g. 1:1:0.35)",
     NULL},
    {"--pp-chunks", VT_OPT_INT, IN_OPTIONS(pp_chunks), 0, 64, "V",
     "interleaved schedule: model chunks per pipeline stage (stage s holds virtual stages s, "
     "s + pp, ...); 0: 2 with interleaved and zb-v, 1 otherwise", NULL},
    {"--zero", VT_OPT_INT, IN_OPTIONS(zero), 0, 1, "0|1",
     "1: shard the optimizer's state (and the weights' EMA) over data-parallel ranks (ZeRO-1)",
     NULL},
    {"--sequence-parallel", VT_OPT_INT, IN_OPTIONS(sequence_parallel), 0, 1, "0|1",
     "1: split the stream and LayerNorms by tokens over the TP group (reduce-scatter + "
     "all-gather instead of all-reduce)", NULL},

    // Checkpoints, evaluation, the EMA, vit3d plan, logs and the watchdog.
    {"--save", VT_OPT_STR, IN_OPTIONS(save_dir), 0, 0, "DIR",
     "write checkpoints to DIR (DIR/step-N, DIR/latest); atomic", NULL},
    {"--save-interval", VT_OPT_INT, IN_OPTIONS(save_interval), 0, 1 << 30, "N",
     "save every N steps and after the last; 0: only after the last", NULL},
    {"--keep-last", VT_OPT_INT, IN_OPTIONS(keep_last), 0, 1 << 20, "K",
     "keep the K newest checkpoints; 0: keep all", NULL},
    {"--keep-every", VT_OPT_I64, IN_OPTIONS(keep_every), 0, 1e15, "N",
     "with --keep-last: also keep every checkpoint whose step is a multiple of N (milestones "
     "for later evaluation or a restart from an earlier point); 0: none", NULL},
    {"--save-hook", VT_OPT_STR, IN_OPTIONS(save_hook), 0, 0, "CMD",
     "after each checkpoint is committed, world rank 0 runs `sh -c CMD` in the background with "
     "VT_CKPT_DIR (the checkpoint's folder), VT_CKPT_STEP and VT_SAVE_DIR set, its output "
     "appended to SAVE_DIR/save-hook.log (e.g. 'aws s3 cp --recursive \"$VT_CKPT_DIR\" "
     "s3://bucket/run/$(basename \"$VT_CKPT_DIR\")'); one at a time: the next commit and the "
     "end of the run wait for it; the last checkpoint's hook failing exits 1", NULL},
    {"--save-hook-timeout", VT_OPT_FLOAT, IN_OPTIONS(save_hook_timeout), 0, 1e7, "SEC",
     "stop a save hook still running after SEC seconds (SIGTERM to its process group, SIGKILL "
     "min(10, SEC) s later), counted as failed, and train on; 0: no limit (a hook that hangs "
     "then holds the next commit until the watchdog's --timeout-s ends the job)", NULL},
    {"--async-save", VT_OPT_INT, IN_OPTIONS(async_save), 0, 1, "0|1",
     "1: every rank writes its part of each checkpoint but the last (and a preemption's) on a "
     "background thread while training goes on, from a snapshot taken at its step; 0: every "
     "save in place", NULL},
    {"--resume", VT_OPT_STR, IN_OPTIONS(resume), 0, 0, "auto|DIR",
     "auto: continue from the newest complete checkpoint in --save (or start fresh); DIR: "
     "from that checkpoint (on any mesh), or from a --save folder's newest complete one",
     NULL},
    {"--resume-fallback", VT_OPT_STR, IN_OPTIONS(resume_fallback), 1, 0, "DIR",
     "with --resume auto: start from this checkpoint (or folder's newest) where --save holds "
     "none yet, e.g. a fine-tuning job's base that a requeue must not restart from",
     NULL},
    {"--init-from", VT_OPT_STR, IN_OPTIONS(init_from), 0, 0, "FILE",
     "start from timm-format weights (safetensors); pos_embed resampled and head renewed "
     "when the image size or class count differ", NULL},
    {"--predictions", VT_OPT_STR, IN_OPTIONS(predictions), 0, 0, "FILE",
     "vit3d eval (any mesh): write each validation image's path, label and top-5 classes "
     "with their probabilities as CSV, in the set's order", NULL},
    {"--logits-out", VT_OPT_STR, IN_OPTIONS(logits_out), 0, 0, "FILE",
     "vit3d eval on one rank: write the validation inputs, labels and logits (safetensors)",
     NULL},
    {"--checkpoint", VT_OPT_STR, IN_OPTIONS(resume), 0, 0, "DIR",
     "vit3d eval: the checkpoint to evaluate, or a --save folder (its newest complete "
     "checkpoint); the same as --resume DIR", NULL},
    {"--use-ema", VT_OPT_INT, IN_OPTIONS(use_ema), 0, 1, "0|1",
     "vit3d eval: 1 evaluates the checkpoint's EMA weights (saved with --model-ema)", NULL},
    {"--model-ema", VT_OPT_FLOAT, IN_OPTIONS(optim.ema_decay), 0, 0.999999, "DECAY",
     "keep an exponential moving average of the weights (timm's ModelEmaV2, e.g. 0.9998): "
     "updated after every step, saved in checkpoints (ema.safetensors), evaluated beside the "
     "weights; 0: off", NULL},
    {"--model-ema-warmup", VT_OPT_INT, IN_OPTIONS(optim.ema_warmup), 0, 1, "0|1",
     "1: the EMA's decay warms up as timm's ModelEmaV3 (--model-ema-warmup): update t uses "
     "min(DECAY, 1 - t^(-2/3)) from t = 2, the first update copies the weights", NULL},
    {"--final-ema", VT_OPT_STR, IN_OPTIONS(final_ema), 0, 0, "FILE",
     "at the end, write the EMA weights like --final-weights (needs --model-ema)", NULL},
    {"--gpus", VT_OPT_INT, IN_OPTIONS(plan_gpus), 0, 1 << 20, "N",
     "vit3d plan: compare every tp x pp x dp mesh of N GPUs for these flags (memory against "
     "--gpu-mem, pipeline idle fraction, traffic) and suggest one; 0: plan the --tp --pp --dp "
     "mesh", NULL},
    {"--gpu-mem", VT_OPT_FLOAT, IN_OPTIONS(plan_gpu_mem), 1, 1e6, "GIB",
     "vit3d plan --gpus: memory per GPU in GiB (H100: 80, H200: 141)", NULL},
    {"--node-gpus", VT_OPT_INT, IN_OPTIONS(plan_node_gpus), 1, 64, "K",
     "vit3d plan --gpus: GPUs per node (tensor parallelism stays inside one)", NULL},
    {"--comm-stats", VT_OPT_INT, IN_OPTIONS(comm_stats), 0, 1, "0|1",
     "1: every rank writes its first step's traffic per axis to LOG_DIR/comm.rank<R>.json",
     NULL},
    {"--trace-steps", VT_OPT_INT, IN_OPTIONS(trace_steps), 0, 1 << 20, "N",
     "write a timeline of N steps from the second on, every rank's steps, pipeline passes, "
     "sends and receives, optimizer, evaluation and saves, to LOG_DIR/trace.json (open it in "
     "ui.perfetto.dev or chrome://tracing); 0: none", NULL},
    {"--final-weights", VT_OPT_STR, IN_OPTIONS(final_weights), 0, 0, "FILE",
     "at the end, write the full unsharded weights (safetensors, timm names)", NULL},
    {"--log-dir", VT_OPT_STR, IN_OPTIONS(log_dir), 0, 0, "DIR",
     "write DIR/metrics.jsonl, one JSON object per step, and TensorBoard's event file "
     "(tensorboard --logdir DIR; --tensorboard 0: not)", NULL},
    {"--tensorboard", VT_OPT_INT, IN_OPTIONS(tensorboard), 0, 1, "0|1",
     "1: with --log-dir, also write the step's figures as TensorBoard scalars (train/, eval/, "
     "eval_ema/) to DIR/events.out.tfevents.*", NULL},
    {"--log-interval", VT_OPT_INT, IN_OPTIONS(log_interval), 1, 1 << 30, "N",
     "print the progress line every N steps", NULL},
    {"--timeout-s", VT_OPT_FLOAT, IN_OPTIONS(timeout_s), 0, 1e7, "SEC",
     "watchdog: when a step or a collective takes longer (startup, evaluation and checkpoint "
     "saves: 10x), every rank stops with a report of where each rank is; 0: off", NULL},
    {"--max-nonfinite-steps", VT_OPT_INT, IN_OPTIONS(max_nonfinite), 1, 1 << 30, "K",
     "a step with a non-finite loss or gradient norm is skipped; K in a row stop the run", NULL},
    {"--straggler-interval", VT_OPT_INT, IN_OPTIONS(straggler_interval), 0, 1 << 30, "N",
     "every N steps print each rank's busy time per step and memory, naming ranks slower than "
     "1.2x the other ranks' median; 0: never", NULL},
    {"--peak-tflops", VT_OPT_FLOAT, IN_OPTIONS(peak_tflops), 0, 1e6, "TF",
     "peak TFLOP/s of one rank's device, for MFU in the progress line and metrics; 0: 989 "
     "(H100/H200 dense bf16) on CUDA, 67 (their fp32) with --precision fp32, no MFU on CPU",
     NULL},
    {.flag = NULL},  // the end of this part
};
