"""Gate 4 bank of 07_experiments: common wrong submissions (each must lose exactly its cells) and correct
alternatives in other styles (each must keep full marks).

ModernGPT (given) calls the student's RMSNorm, SwiGLU, apply_rope and grouped_query_attention, so
test_modern_gpt_hidden loses points for a bug that breaks a cached generation (RoPE without the
offset); numerical bugs that a cached and an uncached run share cost only their own exercise.
"""
from course.bank import Alternative, Replace, Sub, Wrong

RMS = ["test_rmsnorm_visible", "test_rmsnorm_hidden"]
SWIGLU = ["test_swiglu_visible", "test_swiglu_hidden"]
ROPE = ["test_apply_rope_visible", "test_apply_rope_hidden"]
GQA = ["test_gqa_visible", "test_gqa_hidden"]
MODERN = ["test_modern_gpt_hidden"]
SPECIAL = ["test_special_tokens_visible", "test_special_tokens_hidden"]
ACCOUNT = ["test_accounting_visible", "test_accounting_hidden"]
EXPERIMENT = ["test_experiment"]
BONUS = ["bonus_fit_power_law"]

WRONG = [
    # ---- RMSNorm
    Wrong("rmsnorm_is_layernorm", "subtracts the mean (LayerNorm without a bias) instead of dividing by the RMS",
          edits={"RMSNorm": Sub("y = y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight",
                                "y = F.layer_norm(y, y.shape[-1:], eps=self.eps) * self.weight")},
          loses=RMS),
    Wrong("rmsnorm_eps_outside_root", "adds eps after the square root",
          edits={"RMSNorm": Sub("y = y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight",
                                "y = y / (y.pow(2).mean(dim=-1, keepdim=True).sqrt() + self.eps) * self.weight")},
          loses=RMS),
    Wrong("rmsnorm_with_bias", "adds a learned bias, as LayerNorm has",
          edits={"RMSNorm": [Sub("self.weight = nn.Parameter(torch.ones(dim))",
                                 "self.weight = nn.Parameter(torch.ones(dim))\n        self.bias = nn.Parameter(torch.zeros(dim))"),
                             Sub("* self.weight", "* self.weight + self.bias.to(y.dtype)")]},
          loses=RMS),
    Wrong("rmsnorm_promoted_dtype", "returns float32 for float16 input with a float32 weight (type promotion), not x's dtype",
          edits={"RMSNorm": Sub("return y.to(x.dtype)", "return y")},
          loses=RMS),
    Wrong("rmsnorm_half_overflow", "computes in float16 for float16 input: the squares of activations of 300 overflow",
          edits={"RMSNorm": Sub("y = x.float() if x.dtype == torch.float16 else x", "y = x")},
          loses=RMS),
    Wrong("rmsnorm_detached_scale", "right values, but the root mean square is detached: the input's gradient is wrong",
          edits={"RMSNorm": Sub("torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + self.eps)",
                                "torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + self.eps).detach()")},
          loses=RMS),
    # ---- SwiGLU
    Wrong("swiglu_silu_on_up", "applies SiLU to the up branch instead of the gate",
          edits={"SwiGLU": Sub("F.silu(self.gate_proj(x)) * self.up_proj(x)", "self.gate_proj(x) * F.silu(self.up_proj(x))")},
          loses=SWIGLU),
    Wrong("swiglu_gelu", "GELU instead of SiLU (GeGLU)",
          edits={"SwiGLU": Sub("F.silu(self.gate_proj(x))", "F.gelu(self.gate_proj(x))")},
          loses=SWIGLU),
    Wrong("swiglu_biases", "Linear layers with biases",
          edits={"SwiGLU": Sub("bias=False", "bias=True", count=3)},
          loses=SWIGLU),
    Wrong("swiglu_gate_sigmoid_detached", "right values, but the SiLU's sigmoid is detached (g * sigmoid(g).detach()): "
          "the gradient of gate_proj and of the input are wrong",
          edits={"SwiGLU": Sub("F.silu(self.gate_proj(x))", "(lambda g: g * torch.sigmoid(g).detach())(self.gate_proj(x))")},
          loses=SWIGLU),
    # ---- apply_rope
    Wrong("rope_ignores_offset", "always rotates from position 0: a cached token gets position 0's rotation",
          edits={"apply_rope": Sub("torch.arange(offset, offset + T, device=x.device", "torch.arange(T, device=x.device")},
          loses=ROPE + MODERN),
    Wrong("rope_neighbour_pairs", "pairs neighbouring features (0 with 1), the other convention, instead of i with i + D/2",
          edits={"apply_rope": Sub("first, second = x[..., :half], x[..., half:]\n"
                                   "    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)",
                                   "first, second = x[..., 0::2], x[..., 1::2]\n"
                                   "    return torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)")},
          loses=ROPE),
    Wrong("rope_theta_over_d", "θ_i = base^(-i/D) instead of base^(-2i/D)",
          edits={"apply_rope": Sub("/ half)", "/ D)")},
          loses=ROPE),
    Wrong("rope_float32_output", "returns float32 whatever the input's dtype",
          edits={"apply_rope": Sub("cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)",
                                   "cos, sin = angles.cos(), angles.sin()\n    x = x.float()")},
          loses=ROPE),
    Wrong("rope_angles_in_input_dtype", "computes positions and angles in x's dtype: in float16 the angle of position "
          "1 000 is off by up to 0.25 rad",
          edits={"apply_rope": [Sub("theta = base ** (-torch.arange(half, device=x.device) / half)",
                                    "theta = base ** (-torch.arange(half, device=x.device, dtype=x.dtype) / half)"),
                                Sub("torch.arange(offset, offset + T, device=x.device)",
                                    "torch.arange(offset, offset + T, device=x.device, dtype=x.dtype)")]},
          loses=ROPE),
    Wrong("rope_detached_second_half", "right values, but the second half of x is detached: its gradient is lost",
          edits={"apply_rope": Sub("first, second = x[..., :half], x[..., half:]",
                                   "first, second = x[..., :half], x[..., half:].detach()")},
          loses=ROPE),
    # ---- grouped_query_attention
    Wrong("gqa_repeat_not_interleave", "repeats the key/value heads as a whole (k0 k1 k0 k1) instead of each in turn",
          edits={"grouped_query_attention": [Sub("key = key.repeat_interleave(group, dim=1)", "key = key.repeat(1, group, 1, 1)"),
                                             Sub("value = value.repeat_interleave(group, dim=1)",
                                                 "value = value.repeat(1, group, 1, 1)")]},
          loses=GQA),
    Wrong("gqa_no_divisibility_check", "no check that H_kv divides H (a RuntimeError from a shape mismatch instead)",
          edits={"grouped_query_attention": Sub("    if n_heads % n_kv_heads:\n        raise ValueError(f\"{n_kv_heads} key/value "
                                                "heads do not divide {n_heads} query heads\")\n", "")},
          loses=GQA),
    Wrong("gqa_value_gradient_one_head", "right values, but the gradient of each value head reaches it only through its "
          "first query head (the copies are detached)",
          edits={"grouped_query_attention": Sub("value = value.repeat_interleave(group, dim=1)",
                                                "value = torch.cat([value[:, i:i + 1] if j == 0 else value[:, i:i + 1].detach() "
                                                "for i in range(n_kv_heads) for j in range(group)], dim=1)")},
          loses=GQA),
    # ---- bpe_encode with special tokens
    Wrong("special_not_escaped", "puts the special tokens in the pattern without re.escape ('|' means 'or')",
          edits={"bpe_encode_special": Sub("re.escape(s)", "s")},
          loses=SPECIAL),
    Wrong("special_shortest_first", "tries the special tokens shortest first: '<s><s>' is read as two '<s>'",
          edits={"bpe_encode_special": Sub("sorted(special_tokens, key=len, reverse=True)", "sorted(special_tokens, key=len)")},
          loses=SPECIAL),
    Wrong("special_longest_first_globally", "cuts at the longest special token everywhere first, then at the shorter "
          "ones: an overlapping longer token that starts later wins",
          edits={"bpe_encode_special": Replace('''
def bpe_encode(text, merges, special_tokens=None):
    if not special_tokens:
        return bpe_encode_ordinary(text, merges)
    pieces = [text]
    for token in sorted(special_tokens, key=len, reverse=True):
        cut = []
        for piece in pieces:
            if isinstance(piece, int):
                cut.append(piece)
                continue
            parts = piece.split(token)
            for i, part in enumerate(parts):
                if i:
                    cut.append(special_tokens[token])
                cut.append(part)
        pieces = cut
    out = []
    for piece in pieces:
        out.extend([piece] if isinstance(piece, int) else bpe_encode_ordinary(piece, merges))
    return out
''')},
          loses=SPECIAL),
    Wrong("special_strips_spaces", "strips the whitespace around each special token (the space of ' x' is lost)",
          edits={"bpe_encode_special": Sub("out.extend(bpe_encode_ordinary(piece, merges))",
                                           "out.extend(bpe_encode_ordinary(piece.strip(), merges))")},
          loses=SPECIAL),
    # ---- compute accounting
    Wrong("params_untied_head", "counts the tied output layer as a separate vocab_size x embed_dim matrix",
          edits={"accounting": Sub("return vocab_size * d + seq_len * d", "return 2 * vocab_size * d + seq_len * d")},
          loses=ACCOUNT),
    Wrong("params_fixed_expansion", "uses 4 for the feed-forward width whatever expansion_factor says",
          edits={"accounting": Sub("d, hidden = embed_dim, embed_dim * expansion_factor", "d, hidden = embed_dim, embed_dim * 4")},
          loses=ACCOUNT),
    Wrong("flops_causal_half", "counts only the unmasked half of the attention scores",
          edits={"accounting": Sub("attention = num_layers * 2 * seq_len * d", "attention = num_layers * seq_len * d")},
          loses=ACCOUNT),
    Wrong("flops_no_output_layer", "leaves out the output layer's matrix product",
          edits={"accounting": Sub(" + d * vocab_size", "")},
          loses=ACCOUNT),
    Wrong("kv_keys_only", "counts the keys but not the values",
          edits={"accounting": Sub("return 2 * num_layers * batch_size", "return num_layers * batch_size")},
          loses=ACCOUNT),
    Wrong("memory_no_optimizer_state", "counts the weights and gradients but not AdamW's two running averages",
          edits={"accounting": Sub("return 4 * n_params * bytes_per_number", "return 2 * n_params * bytes_per_number")},
          loses=ACCOUNT),
    Wrong("memory_one_moment", "counts one running average (SGD with momentum), not AdamW's two",
          edits={"accounting": Sub("return 4 * n_params * bytes_per_number", "return 3 * n_params * bytes_per_number")},
          loses=ACCOUNT),
    Wrong("memory_fixed_float32", "always counts 4 bytes per number",
          edits={"accounting": Sub("return 4 * n_params * bytes_per_number", "return 16 * n_params")},
          loses=ACCOUNT),
    Wrong("kv_ignores_batch", "counts one sequence whatever batch_size says",
          edits={"accounting": Sub("return 2 * num_layers * batch_size", "return 2 * num_layers")},
          loses=ACCOUNT),
    # ---- the experiment
    Wrong("experiment_two_changes", "changes the declared setting and the learning rate",
          edits={"experiment": Sub('EXPERIMENT["setting"]: EXPERIMENT["value"]}',
                                   'EXPERIMENT["setting"]: EXPERIMENT["value"], "peak_lr": 1e-3}')},
          loses=EXPERIMENT),
    Wrong("experiment_no_ylabel", "the plot has no y label",
          edits={"experiment": Sub('    ax.set_ylabel("held-out loss (nats per token)")\n', "")},
          loses=EXPERIMENT),
    Wrong("experiment_last_seed_only", "plots the last seed's curve instead of the mean over the seeds",
          edits={"experiment": Sub("ax.plot(steps, losses.mean(axis=0),", "ax.plot(steps, losses[-1],")},
          loses=EXPERIMENT),
    Wrong("experiment_no_spread", "plots the means without the seeds' band",
          edits={"experiment": Sub("        ax.fill_between(steps, losses.min(axis=0), losses.max(axis=0), alpha=0.2)\n", "")},
          loses=EXPERIMENT),
    Wrong("experiment_band_mean_std", "the band is the mean ± the standard deviation over seeds, not lowest to highest",
          edits={"experiment": Sub("ax.fill_between(steps, losses.min(axis=0), losses.max(axis=0), alpha=0.2)",
                                   "ax.fill_between(steps, losses.mean(axis=0) - losses.std(axis=0), "
                                   "losses.mean(axis=0) + losses.std(axis=0), alpha=0.2)")},
          loses=EXPERIMENT),
    Wrong("experiment_median_line", "plots the median over seeds instead of the mean",
          edits={"experiment": Sub("ax.plot(steps, losses.mean(axis=0),", "ax.plot(steps, np.median(losses, axis=0),")},
          loses=EXPERIMENT),
    Wrong("experiment_one_seed", "runs one seed per setting with run_config instead of run_seeds",
          edits={"experiment": [Sub('runs = {"baseline": run_seeds(BASELINE),', 'runs = {"baseline": [run_config(BASELINE)],'),
                                Sub('"changed": run_seeds({**BASELINE, EXPERIMENT["setting"]: EXPERIMENT["value"]})}',
                                    '"changed": [run_config({**BASELINE, EXPERIMENT["setting"]: EXPERIMENT["value"]})]}')]},
          loses=EXPERIMENT),
    Wrong("experiment_flops_budget_ignored", "declares the FLOPs budget for a wider model but trains it for the same steps",
          edits={"experiment": Sub('EXPERIMENT = {"setting": "position", "value": "rope"}',
                                   'EXPERIMENT = {"setting": "embed_dim", "value": 64, "budget": "flops"}')},
          loses=EXPERIMENT),
    Wrong("experiment_modifies_baseline", "changes BASELINE in place, so both runs use the changed setting",
          edits={"experiment": Sub('runs = {"baseline": run_seeds(BASELINE),',
                                   'config = BASELINE  # not a copy: the change reaches BASELINE\n'
                                   'config[EXPERIMENT["setting"]] = EXPERIMENT["value"]\n'
                                   'runs = {"baseline": run_seeds(BASELINE),')},
          loses=EXPERIMENT),
    # ---- the optional stretch
    Wrong("power_law_sign", "returns the slope itself instead of -slope",
          edits={"fit_power_law": Sub("float(-slope)", "float(slope)")},
          loses=BONUS),
    Wrong("power_law_endpoints", "draws the line through the first and the last point instead of fitting all of them",
          edits={"fit_power_law": Sub("slope, intercept = np.polyfit(np.log(n_params), np.log(losses), 1)",
                                      "x, y = np.log(np.asarray(n_params)), np.log(np.asarray(losses))\n"
                                      "    slope = (y[-1] - y[0]) / (x[-1] - x[0])\n"
                                      "    intercept = y[0] - slope * x[0]")},
          loses=BONUS),
    # ---- questions
    Wrong("q1_query_heads", "counts the 8 query heads instead of the 2 key/value heads",
          edits={"answer_q1": Sub("answer_q1 = 16384", "answer_q1 = 65536")}, loses=["test_answer_q1"]),
    Wrong("q1_keys_only", "forgets that values are cached too",
          edits={"answer_q1": Sub("answer_q1 = 16384", "answer_q1 = 8192")}, loses=["test_answer_q1"]),
    Wrong("q1_not_a_number", "answers with a string",
          edits={"answer_q1": Sub("answer_q1 = 16384", 'answer_q1 = "16384"')}, loses=["test_answer_q1"]),
    Wrong("q2_one_sequence", "forgets the batch: the cache of one sequence against the weights",
          edits={"answer_q2": Sub("answer_q2 = 843.9", "answer_q2 = 6751.3")}, loses=["test_answer_q2"]),
    Wrong("q2_keys_only", "caches the keys but not the values",
          edits={"answer_q2": Sub("answer_q2 = 843.9", "answer_q2 = 1687.8")}, loses=["test_answer_q2"]),
    Wrong("q2_one_block", "counts the cache of one block instead of 12",
          edits={"answer_q2": Sub("answer_q2 = 843.9", "answer_q2 = 10127")}, loses=["test_answer_q2"]),
    Wrong("q2_not_a_number", "answers with a string",
          edits={"answer_q2": Sub("answer_q2 = 843.9", 'answer_q2 = "844 tokens"')}, loses=["test_answer_q2"]),
]

ALTERNATIVES = [
    Alternative("answers_as_expressions", "the predictions written as the computations that give them",
                edits={"answer_q1": Sub("answer_q1 = 16384", "answer_q1 = 2 * 2 * 2 * 8 * 64 * 4"),
                       "answer_q2": Sub("answer_q2 = 843.9", "answer_q2 = 124_439_808 * 2 / (2 * 12 * 12 * 64 * 8 * 2)")}),
    Alternative("functional_styles",
                "RMSNorm with F.rms_norm; SwiGLU with nn.SiLU; grouped attention with F.scaled_dot_product_attention's "
                "enable_gqa; the fit written as covariance over variance",
                edits={
                    "RMSNorm": Replace('''
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps).to(x.dtype)
'''),
                    "SwiGLU": Sub("F.silu(self.gate_proj(x))", "nn.SiLU()(self.gate_proj(x))"),
                    "grouped_query_attention": Replace('''
def grouped_query_attention(query, key, value, mask=None):
    H, H_kv = query.shape[1], key.shape[1]
    if H % H_kv != 0:
        raise ValueError(f"n_kv_heads={H_kv} must divide n_heads={H}")
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)
'''),
                    "fit_power_law": Replace('''
def fit_power_law(n_params, losses):
    x, y = np.log(np.asarray(n_params, dtype=float)), np.log(np.asarray(losses, dtype=float))
    if len(x) < 2:
        raise ValueError("fit_power_law needs at least two points")
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    return float(math.exp(y.mean() - slope * x.mean())), float(-slope)
'''),
                }),
    Alternative("complex_rope_and_grouped_einsum",
                "RoPE with complex numbers; grouped attention by reshaping the query heads into groups (no copy)",
                edits={
                    "apply_rope": Replace('''
def apply_rope(x, offset=0, base=10000.0):
    D = x.shape[-1]
    if D % 2 == 1:
        raise ValueError(f"D={D} is odd")
    i = torch.arange(0, D, 2, device=x.device, dtype=torch.float64)
    freqs = 1.0 / base ** (i / D)
    positions = torch.arange(x.shape[-2], device=x.device, dtype=torch.float64) + offset
    rotation = torch.polar(torch.ones(len(positions), D // 2, device=x.device, dtype=torch.float64),
                           torch.outer(positions, freqs))
    z = torch.complex(x[..., :D // 2].double(), x[..., D // 2:].double()) * rotation
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
'''),
                    "grouped_query_attention": Replace('''
def grouped_query_attention(query, key, value, mask=None):
    B, H, T_q, d = query.shape
    H_kv = key.shape[1]
    if H % H_kv:
        raise ValueError(f"{H_kv} does not divide {H}")
    q = query.reshape(B, H_kv, H // H_kv, T_q, d)
    scores = torch.einsum("bkgqd,bktd->bkgqt", q, key) / math.sqrt(d)
    if mask is not None:
        m = torch.as_tensor(mask, dtype=torch.bool, device=scores.device)
        m = m.expand(B, H, T_q, key.shape[2]).reshape(B, H_kv, H // H_kv, T_q, key.shape[2])
        scores = scores.masked_fill(~m, float("-inf"))
    weights = scores.softmax(dim=-1)
    return torch.einsum("bkgqt,bktd->bkgqd", weights, value).reshape(B, H, T_q, d)
'''),
                }),
    Alternative("loops_and_other_experiment",
                "special tokens found with str.find in a loop; accounting written as 12 d^2-style sums; an experiment "
                "on the learning rate with the figure built by hand",
                edits={
                    "bpe_encode_special": Replace('''
def bpe_encode(text, merges, special_tokens=None):
    specials = sorted((special_tokens or {}).items(), key=lambda kv: -len(kv[0]))
    out, start, i = [], 0, 0
    while i < len(text) and specials:
        hit = next(((s, v) for s, v in specials if text.startswith(s, i)), None)
        if hit is None:
            i += 1
            continue
        out += bpe_encode_ordinary(text[start:i], merges)
        out.append(hit[1])
        i += len(hit[0])
        start = i
    return out + bpe_encode_ordinary(text[start:], merges)
'''),
                    "accounting": Replace('''
def gpt2_param_count(vocab_size, embed_dim, seq_len, num_layers, expansion_factor=4):
    d, e = embed_dim, expansion_factor
    return (vocab_size + seq_len + 2) * d + num_layers * ((4 + 2 * e) * d * d + (9 + e) * d)


def forward_flops_per_token(vocab_size, embed_dim, seq_len, num_layers, expansion_factor=4):
    d, e = embed_dim, expansion_factor
    return 2 * num_layers * (4 + 2 * e) * d * d + 4 * num_layers * seq_len * d + 2 * d * vocab_size


def kv_cache_bytes(num_layers, n_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_number=2):
    per_layer = 2 * batch_size * n_kv_heads * seq_len * head_dim
    return num_layers * per_layer * bytes_per_number


def training_memory_bytes(n_params, bytes_per_number=4):
    weight = gradient = exp_avg = exp_avg_sq = n_params * bytes_per_number
    return weight + gradient + exp_avg + exp_avg_sq
'''),
                    "experiment": Replace('''
def plot_runs(runs):
    fig = plt.figure()
    ax = fig.add_subplot(1, 1, 1)
    for name in runs:
        curves = [record["eval_losses"] for record in runs[name]]
        mean = [sum(column) / len(column) for column in zip(*curves)]
        x = runs[name][0]["eval_steps"]
        ax.plot(x, mean, label=f"{name}: {mean[-1]:.2f}")
        ax.fill_between(x, [min(c) for c in zip(*curves)], [max(c) for c in zip(*curves)], alpha=0.3)
    ax.set(xlabel="step", ylabel="held-out loss (nats/token)")
    ax.legend(loc="upper right")
    return fig


EXPERIMENT = dict(setting="num_layers", value=3, budget="flops")
changed_config = dict(BASELINE)
changed_config[EXPERIMENT["setting"]] = EXPERIMENT["value"]
runs = {}
runs["baseline"] = run_seeds(BASELINE)
runs["changed"] = run_seeds(changed_config, flops=runs["baseline"][0]["flops"])
experiment_figure = plot_runs(runs)
'''),
                }),
]
