"""Bank of 02_multi_head_attention: common multi-head attention bugs, and correct alternatives."""
from course.bank import Advised, Alternative, Replace, Sub, Wrong

SPLIT = ["test_split_heads_visible", "test_split_heads_hidden"]
MERGE = ["test_merge_heads_visible", "test_merge_heads_hidden"]
MHA = ["test_MultiHeadAttention_visible", "test_MultiHeadAttention_hidden"]
BERT = ["test_mha_from_bert_visible", "test_mha_from_bert_hidden"]
BONUS = ["bonus_grouped_query_attention"]

WRONG = [
    # split_heads / merge_heads (MultiHeadAttention, mha_from_bert and the stretch call them, so they fail too)
    Wrong("split_without_transpose", "split_heads views x as (B, n_heads, T, d) without the transpose",
          edits={"split_heads": Sub("return x.view(B, T, n_heads, embed_dim // n_heads).transpose(1, 2)",
                                    "return x.view(B, n_heads, T, embed_dim // n_heads)")},
          loses=SPLIT + MHA + BERT + BONUS),
    Wrong("merge_without_transpose", "merge_heads reshapes (B, H, T, d) to (B, T, H*d) without transposing back",
          edits={"merge_heads": Sub("x.transpose(1, 2).reshape(B, T, n_heads * d)", "x.reshape(B, T, n_heads * d)")},
          # the weights stay right (the visible BERT check); the output of a BertAttention copy is wrong
          loses=MERGE + MHA + BERT + BONUS),
    # MultiHeadAttention.forward
    Wrong("no_output_projection", "forgets the output projection W^O",
          edits={"MultiHeadAttention": Sub("return self.out(merge_heads(context))", "return merge_heads(context)")},
          loses=MHA + BERT),
    Wrong("values_with_key_matrix", "projects the values with the key matrix",
          edits={"MultiHeadAttention": Sub("v = split_heads(self.value_matrix(value), self.n_heads)",
                                           "v = split_heads(self.key_matrix(value), self.n_heads)")},
          loses=MHA + BERT),
    Wrong("scale_by_sqrt_embed_dim", "divides the scores by sqrt(embed_dim) instead of sqrt(single_head_dim)",
          edits={"MultiHeadAttention": Sub("/ math.sqrt(self.single_head_dim)", "/ math.sqrt(self.embed_dim)")},
          loses=MHA + BERT),
    Wrong("no_scaling", "forgets the 1/sqrt(d_k) scaling",
          edits={"MultiHeadAttention": Sub(" / math.sqrt(self.single_head_dim)", "")},
          loses=MHA + BERT),
    Wrong("softmax_over_queries", "softmax over the query dimension instead of the keys",
          edits={"MultiHeadAttention": Sub("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")},
          loses=MHA + BERT),
    Wrong("mask_ignored", "never applies the mask",
          edits={"MultiHeadAttention": [Sub('scores = scores.masked_fill(blocked, float("-inf"))', "pass"),
                                        Sub("weights = weights.masked_fill(blocked, 0.0)", "pass")]},
          loses=MHA),
    Wrong("mask_bitwise_not", "uses ~mask, which fails for 0/1 integer masks",
          edits={"MultiHeadAttention": Sub("blocked = mask == 0", "blocked = ~mask")},
          loses=MHA),
    Wrong("mask_3d_without_head_axis", "lets a (B, T_q, T_k) mask broadcast as it is (B lands on the head axis)",
          edits={"MultiHeadAttention": Sub("blocked = blocked.unsqueeze(1)", "pass")},
          loses=MHA),
    Wrong("fully_masked_rows_nan", "leaves NaN in the weights of a query whose keys are all blocked",
          edits={"MultiHeadAttention": Sub("weights = weights.masked_fill(blocked, 0.0)", "pass")},
          loses=MHA),
    Wrong("large_negative_fill_only", "fills blocked scores with -1e9 and stops there: a fully blocked query "
          "gets uniform weights instead of zeros",
          edits={"MultiHeadAttention": [Sub('scores.masked_fill(blocked, float("-inf"))', "scores.masked_fill(blocked, -1e9)"),
                                        Sub("weights = weights.masked_fill(blocked, 0.0)", "pass")]},
          loses=MHA),
    Wrong("additive_inf_mask", "adds -inf to blocked scores: the forward pass is right, but a fully blocked "
          "query sends NaN gradients back",
          edits={"MultiHeadAttention": Sub('scores = scores.masked_fill(blocked, float("-inf"))',
                                           'scores = scores + torch.zeros_like(scores).masked_fill(blocked, float("-inf"))')},
          loses=MHA),
    Wrong("tq_tk_broken", "merges the heads with the key length, so T_q != T_k fails (cross-attention)",
          edits={"MultiHeadAttention": Sub(
              "return self.out(merge_heads(context))",
              "return self.out(context.transpose(1, 2).reshape(key.size(0), key.size(1), self.embed_dim))")},
          loses=MHA),
    Wrong("shared_small_linear",
          "the common mistake: splits the input first, then one small Linear(d, d) shared by all heads",
          edits={"MultiHeadAttention": Replace('''
class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim=512, n_heads=8, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.n_heads = n_heads
        self.single_head_dim = embed_dim // n_heads
        d = self.single_head_dim
        self.query_matrix = nn.Linear(d, d)
        self.key_matrix = nn.Linear(d, d)
        self.value_matrix = nn.Linear(d, d)
        self.out = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def forward(self, query, key, value, mask=None):
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        B, Tq, Tk = query.size(0), query.size(1), key.size(1)
        H, d = self.n_heads, self.single_head_dim
        q = self.query_matrix(query.view(B, Tq, H, d)).transpose(1, 2)
        k = self.key_matrix(key.view(B, Tk, H, d)).transpose(1, 2)
        v = self.value_matrix(value.view(B, Tk, H, d)).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-1e20"))
        weights = torch.softmax(scores, dim=-1)
        self.attention_weights = weights
        context = self.dropout(weights) @ v
        return self.out(context.transpose(1, 2).contiguous().view(B, Tq, H * d))
''')},
          loses=MHA + BERT),
    # mha_from_bert
    Wrong("bert_query_key_swapped", "copies BERT's query weights into key_matrix and its key weights into query_matrix",
          edits={"mha_from_bert": [Sub("(mha.query_matrix, self_attention.query)", "(mha.query_matrix, self_attention.key)"),
                                   Sub("(mha.key_matrix, self_attention.key)", "(mha.key_matrix, self_attention.query)")]},
          loses=BERT),
    Wrong("bert_default_heads", "builds MultiHeadAttention(embed_dim) with the default 8 heads instead of BERT's 12",
          edits={"mha_from_bert": Sub("MultiHeadAttention(embed_dim, self_attention.num_attention_heads)",
                                      "MultiHeadAttention(embed_dim)")},
          loses=BERT),
    Wrong("bert_dense_not_copied", "ignores BERT's output.dense (W^O stays random)",
          edits={"mha_from_bert": Sub("if dense is not None:", "if False:")},
          loses=BERT),
    # theory questions
    Wrong("q1_wrong", "answers question 1 (16 heads) with the per-head 32 x 32 count of the common mistake",
          edits={"answer_q1": Sub('answer_q1 = "c"', 'answer_q1 = "a"')}, loses=["test_answer_q1"]),
    Wrong("q2_wrong", "answers question 2 (the scale) with 'the rows no longer sum to 1'",
          edits={"answer_q2": Sub('answer_q2 = "a"', 'answer_q2 = "d"')}, loses=["test_answer_q2"]),
    Wrong("q3_one_head", "predicts question 3 for one head only (15 + 18 = 33 instead of 8 x 33)",
          edits={"answer_q3": Sub("answer_q3 = 264", "answer_q3 = 33")}, loses=["test_answer_q3"]),
    Wrong("q3_padding_queries_blocked", "predicts question 3 as if the 2 padding queries could attend to nothing "
          "(8 x (15 + 26) = 328): the mask blocks keys, the padding tokens still ask their questions",
          edits={"answer_q3": Sub("answer_q3 = 264", "answer_q3 = 328")}, loses=["test_answer_q3"]),
    Wrong("q3_string", "answers the prediction of question 3 with a string",
          edits={"answer_q3": Sub("answer_q3 = 264", 'answer_q3 = "264"')}, loses=["test_answer_q3"]),
    # the optional stretch
    Wrong("gqa_tiled_heads", "grouped-query attention tiles the key/value heads (0, 1, 0, 1) instead of repeating "
          "each in place (0, 0, 1, 1)",
          edits={"GroupedQueryAttention": [Sub("k = k.repeat_interleave(g, dim=1)", "k = k.repeat(1, g, 1, 1)"),
                                           Sub("v = v.repeat_interleave(g, dim=1)", "v = v.repeat(1, g, 1, 1)")]},
          loses=BONUS),
    Wrong("no_dropout", "never applies self.dropout to the attention weights",
          edits={"MultiHeadAttention": Sub("context = self.dropout(weights) @ v", "context = weights @ v")},
          loses=MHA),
    Wrong("weights_stored_after_dropout", "stores the attention weights after the dropout",
          edits={"MultiHeadAttention": [Sub("self.attention_weights = weights\n", "weights = self.dropout(weights)\n        self.attention_weights = weights\n"),
                                        Sub("context = self.dropout(weights) @ v", "context = weights @ v")]},
          loses=MHA),
    Wrong("dropout_on_output", "applies self.dropout to the layer's output instead of the attention weights",
          edits={"MultiHeadAttention": [Sub("context = self.dropout(weights) @ v", "context = weights @ v"),
                                        Sub("return self.out(merge_heads(context))", "return self.dropout(self.out(merge_heads(context)))")]},
          loses=MHA),
    Wrong("fused_dropout_p", "F.scaled_dot_product_attention with dropout_p=self.dropout.p: a dropout of its own, not self.dropout",
          edits={"MultiHeadAttention": Sub("context = self.dropout(weights) @ v",
                                           "context = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~blocked, "
                                           "dropout_p=self.dropout.p if self.training else 0.0)")},
          loses=MHA),
    Wrong("bert_hardcoded_size", "mha_from_bert hard-codes the packaged BERT's sizes (384 features, 12 heads)",
          edits={"mha_from_bert": [Sub("embed_dim = self_attention.query.in_features", "embed_dim = 384"),
                                   Sub("MultiHeadAttention(embed_dim, self_attention.num_attention_heads)",
                                       "MultiHeadAttention(embed_dim, 12)")]},
          loses=BERT),
    Advised("bert_not_moved", "mha_from_bert leaves the new module on the default device, not on BERT's (only the "
            "kernel's report of its devices shows it, so it is advice at grading)",
            edits={"mha_from_bert": Sub("return mha.to(self_attention.query.weight.device).eval()", "return mha.eval()")},
            cells=BERT),
    Wrong("bert_shares_value_layer", "mha_from_bert uses BERT's own value layer (shared, not copied)",
          edits={"mha_from_bert": Sub("    return mha.to(self_attention.query.weight.device).eval()",
                                      "    mha.value_matrix = self_attention.value\n"
                                      "    return mha.to(self_attention.query.weight.device).eval()")},
          loses=BERT),
    Wrong("gqa_no_dropout", "grouped-query attention never applies self.dropout",
          edits={"GroupedQueryAttention": Sub("return self.out(merge_heads(self.dropout(weights) @ v))",
                                              "return self.out(merge_heads(weights @ v))")},
          loses=BONUS),
    Wrong("split_detached", "split_heads detaches its result (no gradient reaches the projections)",
          edits={"split_heads": Sub(".transpose(1, 2)", ".transpose(1, 2).detach()")},
          loses=SPLIT + MHA + BONUS),
    Wrong("merge_detached", "merge_heads detaches its result (no gradient reaches W^Q, W^K, W^V)",
          edits={"merge_heads": Sub("reshape(B, T, n_heads * d)", "reshape(B, T, n_heads * d).detach()")},
          loses=MERGE + MHA + BONUS),
    Wrong("gqa_detached_values", "grouped-query attention detaches the value projection (no gradient reaches it)",
          edits={"GroupedQueryAttention": Sub("v = split_heads(self.value_matrix(value), self.n_kv_heads)",
                                              "v = split_heads(self.value_matrix(value).detach(), self.n_kv_heads)")},
          loses=BONUS),
    Wrong("query_input_detached", "detaches the query input before its projection (query_matrix(query.detach())): the "
          "output is right and all four layers still get gradients, but no gradient reaches the query input "
          "(in a stack, the layers below would not learn through the queries)",
          edits={"MultiHeadAttention": Sub("q = split_heads(self.query_matrix(query), self.n_heads)     # (B, n_heads, T_q, d)",
                                           "q = split_heads(self.query_matrix(query.detach()), self.n_heads)")},
          loses=MHA),
    Wrong("gqa_query_input_detached", "grouped-query attention detaches the query input before its projection: right "
          "outputs, all four layers get gradients, the query input's gradient is missing",
          edits={"GroupedQueryAttention": Sub("q = split_heads(self.query_matrix(query), self.n_heads)      # (B, n_heads, T_q, d)",
                                              "q = split_heads(self.query_matrix(query.detach()), self.n_heads)")},
          loses=BONUS),
    Wrong("gqa_mask_ignored", "grouped-query attention ignores the mask",
          edits={"GroupedQueryAttention": [Sub('scores = scores.masked_fill(blocked, float("-inf"))', "pass"),
                                           Sub("weights = weights.masked_fill(blocked, 0.0)", "pass")]},
          loses=BONUS),
]

_HEAD = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim=512, n_heads=8, dropout=0.0):
        super().__init__()
        if embed_dim % n_heads != 0:
            raise ValueError("embed_dim must be divisible by n_heads")
        self.embed_dim = embed_dim
        self.n_heads = n_heads
        self.single_head_dim = embed_dim // n_heads
        self.query_matrix = nn.Linear(embed_dim, embed_dim)
        self.key_matrix = nn.Linear(embed_dim, embed_dim)
        self.value_matrix = nn.Linear(embed_dim, embed_dim)
        self.out = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None
'''

_GQA_HEAD = '''
class GroupedQueryAttention(nn.Module):
    def __init__(self, embed_dim=512, n_heads=8, n_kv_heads=2, dropout=0.0):
        super().__init__()
        self.embed_dim, self.n_heads, self.n_kv_heads = embed_dim, n_heads, n_kv_heads
        self.single_head_dim = embed_dim // n_heads
        self.query_matrix = nn.Linear(embed_dim, embed_dim)
        self.key_matrix = nn.Linear(embed_dim, n_kv_heads * self.single_head_dim)
        self.value_matrix = nn.Linear(embed_dim, n_kv_heads * self.single_head_dim)
        self.out = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None
'''

ALTERNATIVES = [
    Alternative("loop_over_heads", "a Python loop over the heads, slicing each head's 64 features; nan_to_num",
                edits={"MultiHeadAttention": Replace(_HEAD + '''
    def forward(self, query, key, value, mask=None):
        q, k, v = self.query_matrix(query), self.key_matrix(key), self.value_matrix(value)
        d = self.single_head_dim
        outputs, weights = [], []
        for h in range(self.n_heads):
            cols = slice(h * d, (h + 1) * d)
            scores = q[..., cols] @ k[..., cols].transpose(-2, -1) / math.sqrt(d)   # (B, T_q, T_k)
            if mask is not None:
                m = mask if mask.dim() < 4 else mask[:, 0]          # drop the head axis
                scores = scores.masked_fill(m == 0, float("-inf"))
            w = torch.nan_to_num(torch.softmax(scores, dim=-1))     # all blocked: NaN -> 0
            weights.append(w)
            outputs.append(self.dropout(w) @ v[..., cols])
        self.attention_weights = torch.stack(weights, dim=1)
        return self.out(torch.cat(outputs, dim=-1))
''')}),
    Alternative("einsum", "einsum on (B, T, H, d) tensors, torch.where with a large negative fill",
                edits={"MultiHeadAttention": Replace(_HEAD + '''
    def forward(self, query, key, value, mask=None):
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        B, Tq, _ = query.shape
        Tk = key.size(1)
        H, d = self.n_heads, self.single_head_dim
        q = self.query_matrix(query).reshape(B, Tq, H, d)
        k = self.key_matrix(key).reshape(B, Tk, H, d)
        v = self.value_matrix(value).reshape(B, Tk, H, d)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * d ** -0.5
        if mask is not None:
            scores = torch.where(mask.bool(), scores, torch.full_like(scores, -1e9))
        w = scores.softmax(dim=-1)
        if mask is not None:
            w = torch.where(mask.bool(), w, torch.zeros_like(w))
        self.attention_weights = w
        context = torch.einsum("bhqk,bkhd->bqhd", self.dropout(w), v).reshape(B, Tq, H * d)
        return self.out(context)
''')}),
    Alternative("torch_sdpa", "F.scaled_dot_product_attention for the output when no dropout is needed, the weights "
                "computed alongside",
                edits={"MultiHeadAttention": Replace(_HEAD + '''
    def forward(self, query, key, value, mask=None):
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        q = split_heads(self.query_matrix(query), self.n_heads)
        k = split_heads(self.key_matrix(key), self.n_heads)
        v = split_heads(self.value_matrix(value), self.n_heads)
        allowed = None if mask is None else (mask != 0)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.single_head_dim)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        self.attention_weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        if self.training and self.dropout.p > 0:      # self.dropout on the weights (the fused kernel's own
            context = self.dropout(self.attention_weights) @ v    # dropout_p would bypass the module)
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.out(merge_heads(context))
''')}),
    Alternative("given_sdpa_and_permute", "split/merge with reshape + permute, notebook 01's scaled_dot_product_attention",
                edits={"split_heads": Replace('''
def split_heads(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, -1).permute(0, 2, 1, 3)
'''),
                       "merge_heads": Replace('''
def merge_heads(x):
    x = x.permute(0, 2, 1, 3).contiguous()
    return x.view(x.size(0), x.size(1), -1)
'''),
                       "MultiHeadAttention": Replace(_HEAD + '''
    def forward(self, query, key, value, mask=None):
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        q = split_heads(self.query_matrix(query), self.n_heads)
        k = split_heads(self.key_matrix(key), self.n_heads)
        v = split_heads(self.value_matrix(value), self.n_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask)
        self.attention_weights = weights
        if self.training:                             # notebook 01's function has no dropout: redo the product
            context = self.dropout(weights) @ v
        return self.out(merge_heads(context))
''')}),
    Alternative("bert_load_state_dict", "mha_from_bert through load_state_dict; answers in capitals",
                edits={"mha_from_bert": Replace('''
def mha_from_bert(bert_attention_layer):
    if hasattr(bert_attention_layer, "output"):
        self_attention, dense = bert_attention_layer.self, bert_attention_layer.output.dense
    else:
        self_attention, dense = bert_attention_layer, None
    E = self_attention.query.in_features
    mha = MultiHeadAttention(E, self_attention.num_attention_heads)
    state = {}
    for mine, theirs in [("query_matrix", self_attention.query), ("key_matrix", self_attention.key),
                         ("value_matrix", self_attention.value), ("out", dense)]:
        if theirs is None:
            state["out.weight"], state["out.bias"] = torch.eye(E), torch.zeros(E)
        else:
            state[mine + ".weight"] = theirs.weight.detach().clone()
            state[mine + ".bias"] = theirs.bias.detach().clone()
    mha.load_state_dict(state)
    return mha.to(self_attention.query.weight.device).eval()
'''),
                       "answer_q1": Replace('answer_q1 = "C"'),
                       "answer_q2": Replace('answer_q2 = " a "'),
                       "answer_q3": Replace("answer_q3 = 8 * (15 + 18.0)")}),
    Alternative("gqa_broadcast_groups", "grouped-query attention without copies: queries viewed as "
                "(B, n_kv_heads, g, T_q, d), keys and values broadcast over the group axis",
                edits={"GroupedQueryAttention": Replace(_GQA_HEAD + '''
    def forward(self, query, key, value, mask=None):
        B, Tq, _ = query.shape
        Tk = key.size(1)
        G, d = self.n_kv_heads, self.single_head_dim
        g = self.n_heads // G
        q = self.query_matrix(query).view(B, Tq, G, g, d).permute(0, 2, 3, 1, 4)   # (B, G, g, T_q, d)
        k = self.key_matrix(key).view(B, Tk, G, 1, d).permute(0, 2, 3, 1, 4)       # (B, G, 1, T_k, d)
        v = self.value_matrix(value).view(B, Tk, G, 1, d).permute(0, 2, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).reshape(B, self.n_heads, Tq, Tk)
        if mask is not None:
            allowed = mask.unsqueeze(1) if mask.dim() == 3 else mask
            scores = scores.masked_fill(allowed == 0, float("-inf"))
        w = torch.softmax(scores, dim=-1)
        if mask is not None:
            w = w.masked_fill(allowed == 0, 0.0)
        self.attention_weights = w
        context = self.dropout(w).view(B, G, g, Tq, Tk) @ v                        # (B, G, g, T_q, d)
        return self.out(context.reshape(B, self.n_heads, Tq, d).transpose(1, 2).reshape(B, Tq, self.embed_dim))
''')}),
    Alternative("gqa_fused", "grouped-query attention with F.scaled_dot_product_attention(enable_gqa=True) when no "
                "dropout is needed, the weights computed alongside",
                edits={"GroupedQueryAttention": Replace(_GQA_HEAD + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.query_matrix(query), self.n_heads)
        k = split_heads(self.key_matrix(key), self.n_kv_heads)
        v = split_heads(self.value_matrix(value), self.n_kv_heads)
        allowed = None if mask is None else ((mask.unsqueeze(1) if mask.dim() == 3 else mask) != 0)
        expanded = torch.repeat_interleave(k, self.n_heads // self.n_kv_heads, dim=1)
        scores = q @ expanded.transpose(-2, -1) * self.single_head_dim ** -0.5
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        self.attention_weights = torch.nan_to_num(scores.softmax(-1))
        if self.training and self.dropout.p > 0:
            context = self.dropout(self.attention_weights) @ torch.repeat_interleave(v, self.n_heads // self.n_kv_heads, dim=1)
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        return self.out(merge_heads(context))
''')}),
]

# The red team of issue 34 (a helper given the whole kernel).
MHA_FROM_BERT_DELEGATES = '''def mha_from_bert(bert_attention_layer):
    # no weight copied: the returned module's forward calls BERT's own module
    sa = getattr(bert_attention_layer, "self", bert_attention_layer)
    dense = bert_attention_layer.output.dense if sa is not bert_attention_layer else None
    m = MultiHeadAttention(sa.query.in_features, sa.num_attention_heads)
    for name in ("query_matrix", "key_matrix", "value_matrix", "out"):
        setattr(m, name, nn.Linear(1, 1, device="cpu"))

    def forward(query, key, value, mask=None):
        ctx, w = sa(query)
        m.attention_weights = w
        return dense(ctx) if dense is not None else ctx
    m.forward = forward
    return m.eval()
'''
WRONG += [
    Wrong("attack_mha_from_bert_delegates", "mha_from_bert copies nothing: the returned module's forward calls BERT's own "
          "attention (red team, issue 34: the judge reads the returned module's weights)",
          {"mha_from_bert": Replace(MHA_FROM_BERT_DELEGATES)},
          ["test_mha_from_bert_visible", "test_mha_from_bert_hidden"]),
]

# Exercise 3b, multi_head_attention (issue 36: a debug exercise): the colleague's function with some of its three
# bugs left, and correct fixes in other styles.
DEBUG = ["test_multi_head_attention_visible", "test_multi_head_attention_hidden"]
COLLEAGUE = '''
def multi_head_attention(query, key, value, lengths, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                         n_heads):
    B, T_q, E = query.shape
    T_k = key.shape[1]
    d = E // n_heads
    w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3)
    q = (query @ w_q.T + b_q).reshape(B, n_heads, T_q, d)
    k = (key @ w_k.T + b_k).reshape(B, n_heads, T_k, d)
    v = (value @ w_v.T + b_v).reshape(B, n_heads, T_k, d)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)
    if lengths is not None:
        is_real = torch.arange(T_k) < lengths[:, None]
        scores = scores.masked_fill(~is_real[:, None, :], float("-inf"))
    attn = torch.softmax(scores, -1)
    context = (attn @ v).transpose(1, 2).reshape(B, T_q, E)
    return context @ out_proj_weight.T + out_proj_bias, attn
'''
_FIXES = {"split": [(".reshape(B, n_heads, T_q, d)", ".reshape(B, T_q, n_heads, d).transpose(1, 2)"),
                    (".reshape(B, n_heads, T_k, d)", ".reshape(B, T_k, n_heads, d).transpose(1, 2)")],
          "scale": [("math.sqrt(E)", "math.sqrt(d)")],
          "mask": [("~is_real[:, None, :]", "~is_real[:, None, None, :]")]}


def _colleague_fixed(*bugs_fixed):
    text = COLLEAGUE
    for bug in bugs_fixed:
        for old, new in _FIXES[bug]:
            assert old in text, old
            text = text.replace(old, new)
    return text


COLLEAGUE_FIXED = _colleague_fixed("split", "scale", "mask")
WRONG += [
    Wrong("debug_unchanged", "the colleague's function handed in as it is: all three bugs",
          {"multi_head_attention": Replace(COLLEAGUE)}, DEBUG),
    Wrong("debug_split_left", "the scale and the mask fixed; the heads still cut by a reshape without the transpose",
          {"multi_head_attention": Replace(_colleague_fixed("scale", "mask"))}, DEBUG),
    Wrong("debug_scale_left", "the split and the mask fixed; the scores still divided by sqrt(embed_dim)",
          {"multi_head_attention": Replace(_colleague_fixed("split", "mask"))}, DEBUG),
    Wrong("debug_mask_left", "the split and the scale fixed; the padding mask still (B, 1, T_k), its B on the head axis",
          {"multi_head_attention": Replace(_colleague_fixed("split", "scale"))}, DEBUG),
    Wrong("debug_mask_transposed", "the mask 'fixed' to (B, 1, T_k, 1): it blocks queries instead of keys",
          {"multi_head_attention": Replace(COLLEAGUE_FIXED.replace("~is_real[:, None, None, :]",
                                                                   "~is_real[:, None, :, None]"))}, DEBUG),
    Wrong("debug_merge_broken", "the split fixed by also dropping the transpose of the merge (a reshape both ways)",
          {"multi_head_attention": Replace(_colleague_fixed("scale", "mask").replace(
              "(attn @ v).transpose(1, 2).reshape(B, T_q, E)", "(attn @ v).reshape(B, T_q, E)"))}, DEBUG),
]
ALTERNATIVES += [
    Alternative("debug_minimal_fix", "the colleague's function with the three lines fixed, nothing else changed",
                {"multi_head_attention": Replace(COLLEAGUE_FIXED)}),
    Alternative("debug_view_permute_bool_mask", "view + permute for the heads, a key mask built with unsqueeze, "
                "F.linear for the projections",
                {"multi_head_attention": Replace('''
def multi_head_attention(query, key, value, lengths, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                         n_heads):
    B, T_q, E = query.shape
    T_k, d = key.shape[1], E // n_heads
    w = in_proj_weight.split(E)
    b = in_proj_bias.split(E)
    q, k, v = (F.linear(t, w_i, b_i).view(B, -1, n_heads, d).permute(0, 2, 1, 3)
               for t, w_i, b_i in zip((query, key, value), w, b))
    scores = q @ k.transpose(2, 3) * d ** -0.5
    if lengths is not None:
        keep = torch.arange(T_k).unsqueeze(0) < lengths.unsqueeze(1)
        scores = scores.masked_fill(keep.unsqueeze(1).unsqueeze(2).logical_not(), -math.inf)
    attn = scores.softmax(-1)
    out = (attn @ v).permute(0, 2, 1, 3).contiguous().view(B, T_q, E)
    return F.linear(out, out_proj_weight, out_proj_bias), attn
''')}),
]
