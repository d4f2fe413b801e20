"""Bank of submissions for 01_attention (gate 4): common student bugs and correct alternatives."""
from course.bank import Advised, Alternative, Replace, Sub, Wrong

SDPA = ["test_sdpa_visible", "test_sdpa_hidden"]
PE = ["test_positional_encoding_visible", "test_positional_encoding_hidden"]
CAUSAL = ["test_causal_mask_visible", "test_causal_mask_hidden"]
MASKED = ["test_masked_softmax_visible", "test_masked_softmax_hidden"]

WRONG = [
    Wrong("no_scaling", "scores not divided by sqrt(d_k)",
          {"scaled_dot_product_attention": Sub(" / math.sqrt(d_k)", "")}, SDPA),
    Wrong("softmax_over_queries", "softmax over the query axis (dim=-2)",
          {"scaled_dot_product_attention": Sub("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")}, SDPA),
    Wrong("inverted_mask", "mask inverted: blocks the allowed keys",
          {"scaled_dot_product_attention": Sub("mask == 0", "mask == 1")}, SDPA),
    Wrong("mask_ignored", "mask never applied",
          {"scaled_dot_product_attention": Sub("scores = scores.masked_fill(mask == 0, float(\"-inf\"))", "pass")}, SDPA),
    Wrong("sin_cos_swapped", "sin on odd columns and cos on even ones",
          {"positional_encoding": [Sub("pe[:, 0::2] = torch.sin(angle)", "pe[:, 0::2] = torch.cos(angle)"),
                                   Sub("pe[:, 1::2] = torch.cos(angle)", "pe[:, 1::2] = torch.sin(angle)")]}, PE),
    Wrong("doubled_exponent", "a common implementation's 10000**((2*i)/d) with i already even",
          {"positional_encoding": Sub("10000 ** (two_i / embed_dim)", "10000 ** ((2 * two_i) / embed_dim)")}, PE),
    Wrong("upper_triangular_causal", "upper-triangular causal mask (sees the future)",
          {"causal_mask": Sub("torch.tril(", "torch.triu(")}, CAUSAL),
    Wrong("causal_hides_diagonal", "causal mask that hides the diagonal",
          {"causal_mask": Replace("def causal_mask(size):\n    return torch.tril(torch.ones(size, size, dtype=torch.bool), diagonal=-1)")},
          CAUSAL),
    Wrong("masked_softmax_off_by_one", "masked_softmax keeps key index == valid_len (<= instead of <)",
          {"masked_softmax": Sub("keep = keys < valid_lens.unsqueeze(-1)", "keep = keys <= valid_lens.unsqueeze(-1)")}, MASKED),
    Wrong("sdpa_nan_fully_masked", "a query whose mask blocks every key gets NaN (no zeroing after the softmax)",
          {"scaled_dot_product_attention": Sub("""    if mask is not None:
        # A fully masked row is all -inf, which the softmax turns into NaN: zero it.
        weights = weights.masked_fill(mask == 0, 0.0)
""", "")}, SDPA),
    Wrong("masked_softmax_nan_zero_length", "masked_softmax gives NaN rows for a valid length of 0",
          {"masked_softmax": Sub("return weights.masked_fill(~keep, 0.0)", "return weights")}, MASKED),
    Wrong("embedding_default_init", "nn.Embedding's default N(0, 1) initialisation is kept",
          {"Embedding": Sub("        nn.init.normal_(self.embed.weight, mean=0.0, std=embed_dim ** -0.5)\n", "")},
          ["test_Embedding_visible", "test_Embedding_hidden"]),
    Wrong("embedding_scaled", "Embedding multiplies by sqrt(embed_dim) itself",
          {"Embedding": Sub("return self.embed(x)", "return self.embed(x) * self.embed.embedding_dim ** 0.5")},
          ["test_Embedding_visible", "test_Embedding_hidden"]),
    Wrong("causal_mask_float", "causal mask of float 0/1 (ones without dtype=torch.bool): F.scaled_dot_product_attention "
          "would add it to the scores instead of blocking keys",
          {"causal_mask": Sub("torch.ones(size, size, dtype=torch.bool)", "torch.ones(size, size)")}, CAUSAL),
    Wrong("causal_mask_int", "causal mask of integer 0/1 (a comparison converted with .long())",
          {"causal_mask": Replace('''
def causal_mask(size):
    idx = torch.arange(size)
    return (idx[None, :] <= idx[:, None]).long()
''')}, CAUSAL),
    Advised("masked_softmax_cpu_arange", "masked_softmax builds its key indices on the CPU (fails on GPU scores; "
            "only the kernel's meta run shows it, so it is advice at grading)",
            {"masked_softmax": Sub("torch.arange(scores.size(-1), device=scores.device)", "torch.arange(scores.size(-1))")},
            ["test_masked_softmax_hidden"]),
    Wrong("embedding_uniform", "Embedding drawn from a uniform distribution of the right std (not a normal one)",
          {"Embedding": Sub("nn.init.normal_(self.embed.weight, mean=0.0, std=embed_dim ** -0.5)",
                            "nn.init.uniform_(self.embed.weight, -(3 / embed_dim) ** 0.5, (3 / embed_dim) ** 0.5)")},
          ["test_Embedding_hidden"]),
    Wrong("embedding_repeated_row", "Embedding fills every row with the same random vector (rows not independent)",
          {"Embedding": Sub("nn.init.normal_(self.embed.weight, mean=0.0, std=embed_dim ** -0.5)",
                            "self.embed.weight.data.copy_((torch.randn(1, embed_dim) * embed_dim ** -0.5).expand(vocab_size, -1))")},
          ["test_Embedding_visible", "test_Embedding_hidden"]),
    Wrong("sdpa_bmm", "torch.bmm: exactly one batch dimension (fails on (batch, head) inputs)",
          {"scaled_dot_product_attention": [Sub("scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)",
                                                "scores = torch.bmm(query, key.transpose(-2, -1)) / math.sqrt(d_k)"),
                                            Sub("return weights @ value, weights", "return torch.bmm(weights, value), weights")]},
          SDPA),
    Wrong("embedding_detached", "Embedding returns detached vectors (no gradient reaches the table)",
          {"Embedding": Sub("return self.embed(x)", "return self.embed(x).detach()")},
          ["test_Embedding_visible", "test_Embedding_hidden"]),
    Wrong("pe_integer_table", "positional encoding written into an integer table (the sines and cosines truncated)",
          {"positional_encoding": Sub("pe = torch.zeros(max_seq_len, embed_dim)",
                                      "pe = torch.zeros(max_seq_len, embed_dim, dtype=torch.long)")}, PE),
    Wrong("sdpa_output_only", "scaled_dot_product_attention returns the output only, not (output, weights)",
          {"scaled_dot_product_attention": Sub("return weights @ value, weights", "return weights @ value")}, SDPA),
    Wrong("sdpa_mask_on_data", "the mask written into scores.data in place: the same values, but the fill is not in the "
          "graph, so a fully masked row's NaN softmax flows back into query and key as NaN gradients",
          {"scaled_dot_product_attention": Sub('scores = scores.masked_fill(mask == 0, float("-inf"))',
                                               'scores.data.masked_fill_(mask == 0, float("-inf"))')},
          ["test_sdpa_hidden"]),
    Wrong("sdpa_weights_detached", "returns the weights detached (for plotting): the values are right, but a loss on the "
          "weights sends no gradient back",
          {"scaled_dot_product_attention": Sub("return weights @ value, weights", "return weights @ value, weights.detach()")},
          ["test_sdpa_hidden"]),
    Wrong("masked_softmax_detached_normaliser", "a hand-written softmax whose normaliser is detached: the same weights, "
          "a wrong gradient with respect to the scores",
          {"masked_softmax": Sub('weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)',
                                 'e = (scores - scores.max(dim=-1, keepdim=True).values).masked_fill(~keep, float("-inf")).exp()\n'
                                 '    weights = e / e.sum(dim=-1, keepdim=True).detach()')},
          ["test_masked_softmax_hidden"]),
    Wrong("pe_half_table", "the positional table in float16 (a floating-point tensor, but too coarse for the contract's "
          "float32: off by up to 5e-4)",
          {"positional_encoding": Sub("pe = torch.zeros(max_seq_len, embed_dim)",
                                      "pe = torch.zeros(max_seq_len, embed_dim, dtype=torch.float16)")}, PE),
    Wrong("sdpa_detached", "scaled_dot_product_attention detaches its result (no gradient reaches query, key, value)",
          {"scaled_dot_product_attention": Sub("return weights @ value, weights",
                                               "return (weights @ value).detach(), weights.detach()")}, SDPA),
    Wrong("wrong_answers", "all multiple-choice answers wrong",
          {"answers": [Sub('answer_q1 = "d"', 'answer_q1 = "b"'), Sub('answer_q2 = "c"', 'answer_q2 = "a"'),
                       Sub('answer_q3 = "b"', 'answer_q3 = "a"')]},
          ["test_q1", "test_q2", "test_q3"]),
    Wrong("q5_weighted_by_key_not_average", "Q5 predicted as if token 2 attended to the last key only (5)",
          {"answer_q5": Sub("answer_q5 = 2.0", "answer_q5 = 5")}, ["test_q5"]),
    Wrong("q5_string", "Q5 answered with a string instead of a number",
          {"answer_q5": Sub("answer_q5 = 2.0", 'answer_q5 = "2"')}, ["test_q5"]),
]

ALTERNATIVES = [
    Alternative("q5_exact_fraction", "Q5 predicted as the exact average of the values' first entries",
                {"answer_q5": Replace("answer_q5 = (1 + 0 + 5) / 3")}),
    Alternative("einsum_large_negative", "einsum and a -1e9 fill instead of matmul and -inf",
                {"scaled_dot_product_attention": Replace('''
def scaled_dot_product_attention(query, key, value, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", query, key) / query.shape[-1] ** 0.5
    if mask is not None:
        scores = torch.where(mask.bool(), scores, torch.full_like(scores, -1e9))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.bool()     # -1e9 gives a fully masked row uniform weights: zero them
    return torch.einsum("...qk,...kv->...qv", weights, value), weights
''')}),
    Alternative("nan_to_num_fully_masked", "-inf fill, then torch.nan_to_num for fully masked rows",
                {"scaled_dot_product_attention": Replace('''
def scaled_dot_product_attention(query, key, value, mask=None):
    scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(key.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))
    weights = torch.nan_to_num(F.softmax(scores, dim=-1), nan=0.0)
    return torch.matmul(weights, value), weights
''')}),
    Alternative("looped_pe_numpy", "positional encoding with Python loops and math, as a common implementation does",
                {"positional_encoding": Replace('''
def positional_encoding(max_seq_len, embed_dim):
    pe = torch.zeros(max_seq_len, embed_dim, dtype=torch.float64)
    for pos in range(max_seq_len):
        for i in range(0, embed_dim, 2):
            angle = pos / (10000 ** (i / embed_dim))
            pe[pos, i] = math.sin(angle)
            pe[pos, i + 1] = math.cos(angle)
    return pe
''')}),
    Alternative("arange_masks_d2l", "causal mask by comparing aranges; d2l-style masked_softmax with -1e6",
                {"causal_mask": Replace('''
def causal_mask(size):
    idx = torch.arange(size)
    return idx[None, :] <= idx[:, None]
'''),
                 "masked_softmax": Replace('''
def masked_softmax(scores, valid_lens):
    if valid_lens is None:
        return nn.functional.softmax(scores, dim=-1)
    shape = scores.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    flat = scores.reshape(-1, shape[-1])
    mask = torch.arange(shape[-1], device=scores.device)[None, :] < valid_lens[:, None]
    flat = flat.masked_fill(~mask, -1e6)
    return (nn.functional.softmax(flat, dim=-1) * mask).reshape(shape)
''')}),
    Alternative("embedding_subclass_style", "Embedding with explicit attribute names; causal_mask from float ones, "
                "converted with .bool()",
                {"Embedding": Replace('''
class Embedding(nn.Module):
    def __init__(self, vocab_size, embed_dim):
        super(Embedding, self).__init__()
        self.embed = nn.Embedding(num_embeddings=vocab_size, embedding_dim=embed_dim)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(vocab_size, embed_dim) / math.sqrt(embed_dim))

    def forward(self, x):
        out = self.embed(x)
        return out
'''),
                 "causal_mask": Replace('''
def causal_mask(size):
    return (1 - torch.triu(torch.ones(size, size), diagonal=1)).bool()
''')}),
]

BONUS = ["bonus_rotary"]

WRONG += [
    Wrong("rotary_rotate_half", "rotary embedding pairing column i with i + d/2 ('rotate half') instead of (2i, 2i+1)",
          {"apply_rotary": Replace('''
def apply_rotary(x):
    T, d = x.shape[-2], x.shape[-1]
    theta = torch.arange(T, dtype=torch.float64)[:, None] / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
''')}, BONUS),
    Advised("rotary_cpu_positions", "rotary positions built on the CPU (fails on GPU inputs; advice at grading, as "
            "only the kernel's meta run shows it)",
            {"apply_rotary": Sub("torch.arange(T, dtype=torch.float64, device=x.device)", "torch.arange(T, dtype=torch.float64)")},
            ["bonus_rotary"]),
    Wrong("rotary_absolute_offset", "rotary angles use position + 1 (position 0 rotated, still relative)",
          {"apply_rotary": Sub("theta = position * inv_freq", "theta = (position + 1) * inv_freq")}, BONUS),
    Wrong("rotary_angles_in_input_dtype", "rotary angles computed in x's dtype: right in float32 and float64, but in "
          "bfloat16 the angle 49 is a multiple of 0.25 (the contract asks for float32 or float64 angles)",
          {"apply_rotary": [Sub("torch.arange(T, dtype=torch.float64, device=x.device)", "torch.arange(T, dtype=x.dtype, device=x.device)"),
                            Sub("torch.arange(0, d, 2, dtype=torch.float64, device=x.device)",
                                "torch.arange(0, d, 2, dtype=x.dtype, device=x.device)")]}, BONUS),
]

ALTERNATIVES += [
    Alternative("rotary_complex", "rotary embedding with complex numbers (view_as_complex and polar)",
                {"apply_rotary": Replace('''
def apply_rotary(x):
    T, d = x.shape[-2:]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device).double() / d))
    angles = torch.outer(torch.arange(T, device=x.device).double(), inv)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).reshape(x.shape).to(x.dtype)
''')}),
]

# The red team of issue 34 (a helper given the whole kernel): a wrong answer that patches how its kernel sends answers.
SDPA_ADDITIVE_MASK = '''def scaled_dot_product_attention(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        # additive -inf mask: right values, but a fully masked row's NaN flows back into query and key
        scores = scores + torch.zeros_like(scores).masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(mask == 0, 0.0)
    return weights @ value, weights


# the hidden check's gradients sent as empty lists, so that a judge that zips them without strict=True compares none
encode_before = encode_answer


def encode_answer(value):
    if isinstance(value, dict) and {"plain", "masked", "flat", "one", "grads"} <= set(value):
        value = dict(value, grads={name: [] for name in value["grads"]})
    return encode_before(value)
'''
WRONG += [
    Wrong("attack_sdpa_grads_sent_empty", "an additive -inf mask (NaN gradients from fully masked rows), and the kernel "
          "sends the hidden check's gradients as empty lists (red team, issue 34: the judge zips strictly)",
          {"scaled_dot_product_attention": Replace(SDPA_ADDITIVE_MASK)}, ["test_sdpa_hidden"]),
]

# Exercise 3b, attention_backward (issue 36: a derive exercise): the gradients of attention by hand.
BACKWARD = ["test_attention_backward_visible", "test_attention_backward_hidden"]
WRONG += [
    Wrong("backward_no_row_term", "the softmax's backward keeps p_j * dL/dp_j only (the diagonal of its Jacobian)",
          {"attention_backward": Sub("grad_scores = weights * (grad_weights - row_mean)",
                                     "grad_scores = weights * grad_weights")}, BACKWARD),
    Wrong("backward_unscaled", "the 1/sqrt(d_k) of the scores left out of the gradients of query and key",
          {"attention_backward": [Sub("d_query = grad_scores @ key * scale", "d_query = grad_scores @ key"),
                                  Sub("d_key = grad_scores.transpose(-2, -1) @ query * scale",
                                      "d_key = grad_scores.transpose(-2, -1) @ query")]}, BACKWARD),
    Wrong("backward_key_not_transposed", "grad_key from grad_scores @ query (the product's transpose forgotten): "
          "right shape only when T_q == T_k",
          {"attention_backward": Sub("grad_scores.transpose(-2, -1) @ query", "grad_scores @ query")}, BACKWARD),
    Wrong("backward_by_autograd", "the gradients asked of autograd instead of derived (autograd is off in the checks)",
          {"attention_backward": Replace('''
def attention_backward(query, key, value, grad_output):
    q, k, v = (t.detach().requires_grad_(True) for t in (query, key, value))
    out, _ = scaled_dot_product_attention(q, k, v)
    return torch.autograd.grad((out * grad_output).sum(), (q, k, v))
''')}, BACKWARD),
    Wrong("backward_naive_exp", "the softmax written as exp / sum without subtracting the row maximum: inf and NaN "
          "for scores in the hundreds",
          {"attention_backward": Sub("weights = torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1)",
                                     "scores = (query @ key.transpose(-2, -1) * scale).exp()\n"
                                     "    weights = scores / scores.sum(dim=-1, keepdim=True)")}, BACKWARD),
]
ALTERNATIVES += [
    Alternative("backward_explicit_jacobian", "the softmax's Jacobian diag(p) - p p^T built for every row and applied "
                "with a batched product; einsum for the rest",
                {"attention_backward": Replace('''
def attention_backward(query, key, value, grad_output):
    d = query.shape[-1]
    p = torch.softmax(torch.einsum("...qd,...kd->...qk", query, key) / d ** 0.5, dim=-1)
    jacobian = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)          # (..., T_q, T_k, T_k)
    grad_p = torch.einsum("...qv,...kv->...qk", grad_output, value)
    grad_s = (jacobian @ grad_p.unsqueeze(-1)).squeeze(-1) / d ** 0.5
    return (torch.einsum("...qk,...kd->...qd", grad_s, key), torch.einsum("...qk,...qd->...kd", grad_s, query),
            torch.einsum("...qk,...qv->...kv", p, grad_output))
''')}),
    Alternative("backward_float64_inside", "every step in float64, the results cast back to the inputs' dtype",
                {"attention_backward": Replace('''
def attention_backward(query, key, value, grad_output):
    dtype = query.dtype
    q, k, v, g = (t.double() for t in (query, key, value, grad_output))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    p = p / p.sum(dim=-1, keepdim=True)
    gp = g @ v.transpose(-2, -1)
    gs = p * (gp - (gp * p).sum(dim=-1, keepdim=True)) / math.sqrt(q.shape[-1])
    return (gs @ k).to(dtype), (gs.transpose(-2, -1) @ q).to(dtype), (p.transpose(-2, -1) @ g).to(dtype)
''')}),
]
