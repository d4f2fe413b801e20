"""Bank of submissions for 03_encoder (gate 4): common student bugs and correct alternatives.

The BERT model of the capstone is built from the student's TransformerBlock, so block bugs that
change BERT's output also lose the visible BERT check (the hidden BERT check grades the loader
with a reference block). The residual-with-value bug cannot be seen in self-attention, so BERT
keeps its points there.
"""
from course.bank import Alternative, Replace, Sub, Wrong

BLOCK = ["test_transformer_block_visible", "test_transformer_block_hidden"]
ENCODER = ["test_transformer_encoder_visible", "test_transformer_encoder_hidden"]
BERT = ["test_load_bert_weights_visible", "test_load_bert_weights_hidden"]
BERT_VISIBLE = ["test_load_bert_weights_visible"]
STRETCH = ["bonus_pre_ln_block"]

POST_LN = ("        x = self.norm1(query + self.dropout1(self.attention(query, key, value, mask)))\n"
           "        return self.norm2(x + self.dropout2(self.feed_forward(x)))")
STRETCH_FORWARD = ("        normed = self.norm1(x)\n"
                   "        y = x + self.dropout1(self.attention(normed, normed, normed, mask))\n"
                   "        return y + self.dropout2(self.feed_forward(self.norm2(y)))")
PRE_LN = ("        x = query + self.dropout1(self.attention(self.norm1(query), self.norm1(key), self.norm1(value), mask))\n"
          "        return x + self.dropout2(self.feed_forward(self.norm2(x)))")

WRONG = [
    Wrong("no_residual", "the attention sublayer has no residual: norm1(dropout1(attention(...)))",
          {"transformer_block": Sub("self.norm1(query + self.dropout1(", "self.norm1(self.dropout1(")},
          BLOCK + BERT_VISIBLE),
    Wrong("no_ffn_residual", "the feed-forward sublayer has no residual: norm2(dropout2(feed_forward(x)))",
          {"transformer_block": Sub("self.norm2(x + self.dropout2(", "self.norm2(self.dropout2(")},
          BLOCK + BERT_VISIBLE),
    Wrong("pre_ln", "pre-LN block (x + F(LN(x))) instead of the paper's post-LN",
          {"transformer_block": Sub(POST_LN, PRE_LN)}, BLOCK + BERT_VISIBLE),
    Wrong("residual_with_value", "a common implementation's residual: value + attention instead of query + attention",
          {"transformer_block": Sub("self.norm1(query +", "self.norm1(value +")}, BLOCK),
    Wrong("ffn_ignores_activation", "the feed-forward network hard-codes nn.ReLU() instead of activation()",
          {"transformer_block": Sub("nn.Linear(embed_dim, hidden), activation(),", "nn.Linear(embed_dim, hidden), nn.ReLU(),")},
          BLOCK + BERT_VISIBLE),
    Wrong("mask_not_passed", "the block never passes mask to the attention",
          {"transformer_block": Sub("self.attention(query, key, value, mask)", "self.attention(query, key, value)")},
          BLOCK + BERT_VISIBLE),
    Wrong("shared_layers", "the encoder's layers are one block repeated: [block] * num_layers",
          {"transformer_encoder": Sub(
              "[TransformerBlock(embed_dim, expansion_factor, n_heads, dropout) for _ in range(num_layers)]",
              "[TransformerBlock(embed_dim, expansion_factor, n_heads, dropout)] * num_layers")},
          ENCODER),
    Wrong("no_positional_encoding", "the encoder skips the positional encoder",
          {"transformer_encoder": Sub("out = self.positional_encoder(self.embedding_layer(x))",
                                      "out = self.embedding_layer(x)")}, ENCODER),
    Wrong("encoder_mask_not_passed", "the encoder does not pass the mask to its layers",
          {"transformer_encoder": Sub("out = block(out, out, out, mask)", "out = block(out, out, out)")},
          ENCODER),
    Wrong("layers_not_chained", "every layer reads the embeddings instead of the previous layer's output",
          {"transformer_encoder": [Sub("out = self.positional_encoder(self.embedding_layer(x))",
                                       "x0 = self.positional_encoder(self.embedding_layer(x))"),
                                   Sub("out = block(out, out, out, mask)", "out = block(x0, x0, x0, mask)")]},
          ENCODER),
    Wrong("bert_no_token_type", "the loader forgets the token-type embeddings",
          {"load_bert_weights": Sub("        (model.token_type_embeddings, hf_bert.embeddings.token_type_embeddings),\n", "")},
          BERT),
    Wrong("bert_no_embedding_norm", "the loader forgets the embedding LayerNorm",
          {"load_bert_weights": Sub("        (model.embedding_norm, hf_bert.embeddings.LayerNorm),\n", "")}, BERT),
    Wrong("bert_swapped_norms", "the loader swaps the two LayerNorms of each block",
          {"load_bert_weights": [
              Sub("(block.norm1, layer.attention.output.LayerNorm)", "(block.norm1, layer.output.LayerNorm)"),
              Sub("(block.norm2, layer.output.LayerNorm)", "(block.norm2, layer.attention.output.LayerNorm)")]},
          BERT),
    Wrong("bert_reversed_copy", "the loader copies in the wrong direction (from model into hf_bert)",
          {"load_bert_weights": Sub("ours.load_state_dict(theirs.state_dict())", "theirs.load_state_dict(ours.state_dict())")},
          BERT),
    Wrong("bert_no_biases", "the loader copies weights but not biases",
          {"load_bert_weights": Sub("ours.load_state_dict(theirs.state_dict())",
                                    "ours.weight.data.copy_(theirs.weight.data)")}, BERT),
    Wrong("shared_layer_norm", "one LayerNorm for both sublayers: self.norm2 = self.norm1",
          {"transformer_block": Sub("        self.norm2 = nn.LayerNorm(embed_dim)\n", "        self.norm2 = self.norm1\n")},
          BLOCK + BERT_VISIBLE),
    Wrong("stretch_post_ln", "the optional pre-LN block normalises after the residual add (post-LN)",
          {"pre_ln_block": Sub(STRETCH_FORWARD,
                               "        y = self.norm1(x + self.dropout1(self.attention(x, x, x, mask)))\n"
                               "        return self.norm2(y + self.dropout2(self.feed_forward(y)))")},
          STRETCH),
    Wrong("stretch_residual_normalised", "the optional pre-LN block adds the normalised copy LN(x) as the residual",
          {"pre_ln_block": Sub("y = x + self.dropout1(", "y = normed + self.dropout1(")}, STRETCH),
    Wrong("stretch_final_norm", "the optional pre-LN block applies norm2 again after the last add",
          {"pre_ln_block": Sub("return y + self.dropout2(self.feed_forward(self.norm2(y)))",
                               "return self.norm2(y + self.dropout2(self.feed_forward(self.norm2(y))))")},
          STRETCH),
    Wrong("stretch_ignores_activation", "the optional pre-LN block hard-codes nn.ReLU()",
          {"pre_ln_block": Sub("nn.Linear(embed_dim, hidden), activation(),", "nn.Linear(embed_dim, hidden), nn.ReLU(),")},
          STRETCH),
    Wrong("no_dropout1", "the attention sublayer has no dropout before its residual add (dropout1 unused)",
          {"transformer_block": Sub("self.norm1(query + self.dropout1(self.attention(query, key, value, mask)))",
                                    "self.norm1(query + self.attention(query, key, value, mask))")},
          BLOCK),
    Wrong("no_dropout2", "the feed-forward sublayer has no dropout before its residual add (dropout2 unused)",
          {"transformer_block": Sub("self.norm2(x + self.dropout2(self.feed_forward(x)))",
                                    "self.norm2(x + self.feed_forward(x))")},
          BLOCK),
    Wrong("attention_without_dropout", "the block's attention is built without the dropout rate",
          {"transformer_block": Sub("MultiHeadAttention(embed_dim, n_heads, dropout)", "MultiHeadAttention(embed_dim, n_heads)")},
          BLOCK),
    Wrong("dropout_in_eval", "F.dropout without training=self.training: dropout also in eval mode",
          {"transformer_block": Sub("self.dropout1(self.attention(query, key, value, mask))",
                                    "F.dropout(self.attention(query, key, value, mask), self.dropout1.p)")},
          BLOCK + ENCODER + BERT_VISIBLE),
    Wrong("encoder_positional_no_dropout", "the encoder's positional encoder is built without the dropout rate",
          {"transformer_encoder": Sub("PositionalEmbedding(seq_len, embed_dim, dropout)", "PositionalEmbedding(seq_len, embed_dim)")},
          ENCODER),
    Wrong("stretch_no_dropout2", "the optional pre-LN block has no dropout on the feed-forward output",
          {"pre_ln_block": Sub("return y + self.dropout2(self.feed_forward(self.norm2(y)))",
                               "return y + self.feed_forward(self.norm2(y))")},
          STRETCH),
    Wrong("stretch_fixed_heads", "the optional pre-LN block hard-codes 8 attention heads",
          {"pre_ln_block": Sub("self.attention = MultiHeadAttention(embed_dim, n_heads, dropout)",
                               "self.attention = MultiHeadAttention(embed_dim, 8, dropout)")},
          STRETCH),
    Wrong("block_query_residual_detached", "a stop-gradient on the attention sublayer's residual (query.detach() + ...): "
          "the output is right and every parameter still gets a gradient, but the gradient with respect to the input "
          "is not the oracle's",
          {"transformer_block": Sub("self.norm1(query + self.dropout1(", "self.norm1(query.detach() + self.dropout1(")},
          BLOCK),
    Wrong("block_key_detached", "the key is detached before the attention (self.attention(query, key.detach(), ...)): "
          "right outputs, every parameter gets a gradient, the key's (and in self-attention the input's) is wrong",
          {"transformer_block": Sub("self.attention(query, key, value, mask)", "self.attention(query, key.detach(), value, mask)")},
          BLOCK),
    Wrong("encoder_keys_values_detached", "the encoder detaches the keys and values it passes to each block: right "
          "outputs, every parameter gets a gradient, but the embedding table's (and earlier layers') is wrong",
          {"transformer_encoder": Sub("out = block(out, out, out, mask)", "out = block(out, out.detach(), out.detach(), mask)")},
          ENCODER),
    Wrong("stretch_residual_detached", "the optional pre-LN block detaches the residual stream (x.detach() + ...): right "
          "outputs, every parameter gets a gradient, the input's gradient is wrong",
          {"pre_ln_block": Sub("y = x + self.dropout1(", "y = x.detach() + self.dropout1(")}, STRETCH),
    Wrong("wrong_answers", "all multiple-choice answers wrong",
          {"answer_q1": Sub('answer_q1 = "d"', 'answer_q1 = "a"'),
           "answer_q2": Sub('answer_q2 = "b"', 'answer_q2 = "a"'),
           "answer_q3": Sub('answer_q3 = "a"', 'answer_q3 = "b"')},
          ["test_q1", "test_q2", "test_q3"]),
    Wrong("q4_weights_only", "predicts question 4 as 4 E^2 + 2 k E^2 (the weight matrices, no biases, no LayerNorms)",
          {"answer_q4": Sub("answer_q4 = 527104", "answer_q4 = 8 * 256 ** 2")}, ["test_q4"]),
    Wrong("q4_string", "answers the prediction of question 4 with a string",
          {"answer_q4": Sub("answer_q4 = 527104", 'answer_q4 = "527,104"')}, ["test_q4"]),
]

BLOCK_STEPWISE = '''
class TransformerBlock(nn.Module):
    def __init__(self, embed_dim, expansion_factor=4, n_heads=8, dropout=0.2, activation=nn.ReLU):
        super().__init__()
        hidden = expansion_factor * embed_dim
        layers = [nn.Linear(embed_dim, hidden), activation(), nn.Linear(hidden, embed_dim)]
        self.attention = MultiHeadAttention(embed_dim=embed_dim, n_heads=n_heads, dropout=dropout)
        self.norm1, self.norm2 = nn.LayerNorm(embed_dim), nn.LayerNorm(embed_dim)
        self.feed_forward = nn.Sequential(*layers)
        self.dropout1, self.dropout2 = nn.Dropout(p=dropout), nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        attended = self.attention(query=query, key=key, value=value, mask=mask)
        residual = query + self.dropout1(attended)
        x = self.norm1(residual)
        ff_out = self.feed_forward(x)
        ff_out = self.dropout2(ff_out)
        out = self.norm2(ff_out + x)
        return out
'''

BLOCK_ADDNORM = '''
class TransformerBlock(nn.Module):
    def __init__(self, embed_dim, expansion_factor=4, n_heads=8, dropout=0.2, activation=nn.ReLU):
        super(TransformerBlock, self).__init__()
        self.attention = MultiHeadAttention(embed_dim, n_heads, dropout)
        self.norm1 = nn.LayerNorm(embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.feed_forward = nn.Sequential()
        self.feed_forward.append(nn.Linear(embed_dim, embed_dim * expansion_factor))
        self.feed_forward.append(activation())
        self.feed_forward.append(nn.Linear(embed_dim * expansion_factor, embed_dim))
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _add_norm(self, x, y, dropout, norm):
        # d2l's AddNorm: LayerNorm(dropout(Y) + X)
        return norm(dropout(y) + x)

    def forward(self, query, key, value, mask=None):
        x = self._add_norm(query, self.attention(query, key, value, mask), self.dropout1, self.norm1)
        return self._add_norm(x, self.feed_forward(x), self.dropout2, self.norm2)
'''

ENCODER_APPEND = '''
class TransformerEncoder(nn.Module):
    def __init__(self, seq_len, vocab_size, embed_dim, num_layers=2, expansion_factor=4, n_heads=8, dropout=0.2):
        super().__init__()
        self.embedding_layer = Embedding(vocab_size, embed_dim)
        self.positional_encoder = PositionalEmbedding(seq_len, embed_dim, dropout=dropout)
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(TransformerBlock(embed_dim, expansion_factor=expansion_factor,
                                                n_heads=n_heads, dropout=dropout))

    def forward(self, x, mask=None):
        hidden = self.embedding_layer(x)
        hidden = self.positional_encoder(hidden)
        for i in range(len(self.layers)):
            hidden = self.layers[i](hidden, hidden, hidden, mask=mask)
        return hidden
'''

LOADER_PAIRS = '''
def load_bert_weights(model, hf_bert):
    emb = hf_bert.embeddings
    pairs = [(model.word_embeddings, emb.word_embeddings),
             (model.position_embeddings, emb.position_embeddings),
             (model.token_type_embeddings, emb.token_type_embeddings),
             (model.embedding_norm, emb.LayerNorm)]
    for block, layer in zip(model.layers, hf_bert.encoder.layer):
        pairs += [(block.attention.query_matrix, layer.attention.self.query),
                  (block.attention.key_matrix, layer.attention.self.key),
                  (block.attention.value_matrix, layer.attention.self.value),
                  (block.attention.out, layer.attention.output.dense),
                  (block.norm1, layer.attention.output.LayerNorm),
                  (block.feed_forward[0], layer.intermediate.dense),
                  (block.feed_forward[2], layer.output.dense),
                  (block.norm2, layer.output.LayerNorm)]
    with torch.no_grad():
        for ours, theirs in pairs:
            ours.weight.copy_(theirs.weight)
            if getattr(ours, "bias", None) is not None:
                ours.bias.copy_(theirs.bias)
    return model
'''

LOADER_STATE_DICT = '''
def load_bert_weights(model, hf_bert):
    sd = hf_bert.state_dict()
    new = {
        "word_embeddings.weight": sd["embeddings.word_embeddings.weight"],
        "position_embeddings.weight": sd["embeddings.position_embeddings.weight"],
        "token_type_embeddings.weight": sd["embeddings.token_type_embeddings.weight"],
        "embedding_norm.weight": sd["embeddings.LayerNorm.weight"],
        "embedding_norm.bias": sd["embeddings.LayerNorm.bias"],
    }
    names = {"attention.query_matrix": "attention.self.query", "attention.key_matrix": "attention.self.key",
             "attention.value_matrix": "attention.self.value", "attention.out": "attention.output.dense",
             "norm1": "attention.output.LayerNorm", "feed_forward.0": "intermediate.dense",
             "feed_forward.2": "output.dense", "norm2": "output.LayerNorm"}
    for i in range(len(model.layers)):
        for ours, theirs in names.items():
            for p in ("weight", "bias"):
                new[f"layers.{i}.{ours}.{p}"] = sd[f"encoder.layer.{i}.{theirs}.{p}"]
    model.load_state_dict(new, strict=True)
    return model
'''

LOADER_DATA = '''
def load_bert_weights(model, hf_bert):
    def take(dst, src):
        for name, p in dst.named_parameters():
            p.data = dict(src.named_parameters())[name].data.clone()

    e = hf_bert.embeddings
    take(model.word_embeddings, e.word_embeddings)
    take(model.position_embeddings, e.position_embeddings)
    take(model.token_type_embeddings, e.token_type_embeddings)
    take(model.embedding_norm, e.LayerNorm)
    for i, layer in enumerate(hf_bert.encoder.layer):
        block = model.layers[i]
        take(block.attention.query_matrix, layer.attention.self.query)
        take(block.attention.key_matrix, layer.attention.self.key)
        take(block.attention.value_matrix, layer.attention.self.value)
        take(block.attention.out, layer.attention.output.dense)
        take(block.norm1, layer.attention.output.LayerNorm)
        take(block.feed_forward[0], layer.intermediate.dense)
        take(block.feed_forward[2], layer.output.dense)
        take(block.norm2, layer.output.LayerNorm)
'''

PRE_LN_SUBCLASS = '''
class PreLNBlock(TransformerBlock):
    """Reuses TransformerBlock's constructor; only the order of the operations changes."""

    def forward(self, x, mask=None):
        a = self.norm1(x)
        x = x + self.dropout1(self.attention(a, a, a, mask=mask))
        f = self.feed_forward(self.norm2(x))
        return x + self.dropout2(f)
'''

ALTERNATIVES = [
    Alternative("block_stepwise", "block with named intermediate steps, keyword arguments, nn.Sequential(*list)",
                {"transformer_block": Replace(BLOCK_STEPWISE)}),
    Alternative("block_addnorm_helper", "block with a d2l-style AddNorm helper and Sequential.append",
                {"transformer_block": Replace(BLOCK_ADDNORM)}),
    Alternative("encoder_append_loop", "encoder built with ModuleList.append and an index loop",
                {"transformer_encoder": Replace(ENCODER_APPEND)}),
    Alternative("loader_weight_bias_pairs", "loader copying .weight and .bias over a list of module pairs",
                {"load_bert_weights": Replace(LOADER_PAIRS)}),
    Alternative("loader_state_dict", "loader building a renamed state dict and load_state_dict(strict=True)",
                {"load_bert_weights": Replace(LOADER_STATE_DICT)}),
    Alternative("loader_param_data_no_return", "loader assigning .data clones, returning nothing",
                {"load_bert_weights": Replace(LOADER_DATA)}),
    Alternative("stretch_subclass", "the optional pre-LN block as a subclass of TransformerBlock",
                {"pre_ln_block": Replace(PRE_LN_SUBCLASS)}),
    Alternative("answers_upper_case", "multiple-choice answers in capitals with spaces",
                {"answer_q1": Sub('answer_q1 = "d"', 'answer_q1 = " D "'),
                 "answer_q4": Sub("answer_q4 = 527104", "answer_q4 = 527104.0"),
                 "answer_q3": Sub('answer_q3 = "a"', 'answer_q3 = "A"')}),
]

# The red team of issue 34 (a helper given the whole kernel).
LOADER_DELEGATES = '''def load_bert_weights(model, hf_bert):
    # no weight is copied: the model's forward is handed to the reference BERT itself
    def forward(input_ids, token_type_ids=None, attention_mask=None):
        out = hf_bert(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                      output_hidden_states=True, output_attentions=True)
        for layer, a in zip(model.layers, out.attentions):
            if getattr(layer, "attention", None) is not None:
                layer.attention.attention_weights = a
        return tuple(out.hidden_states)
    model.forward = forward
    return model
'''
WRONG += [
    Wrong("attack_load_bert_delegates", "load_bert_weights copies nothing and hands the model's forward to the BERT it "
          "was given (red team, issue 34: the judge reads the loaded model's own weights)",
          {"load_bert_weights": Replace(LOADER_DELEGATES)}, BERT),
]

# Exercise 1b, layer_norm_backward (issue 36: a derive exercise): LayerNorm's gradients by hand.
LN_BACKWARD = ["test_layer_norm_backward_visible", "test_layer_norm_backward_hidden"]
LN_RETURN = "    return inv_std * (grad_x_hat - mean_term - var_term), grad_weight, grad_bias"
LN_INV_STD = "    inv_std = torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)            # (..., 1)"
LN_PARAMS = ("    grad_weight = (grad_output * x_hat).reshape(-1, features).sum(dim=0)\n"
             "    grad_bias = grad_output.reshape(-1, features).sum(dim=0)")
WRONG += [
    Wrong("ln_backward_no_row_terms", "grad_x treats the mean and the variance as constants: weight * grad_output / sigma",
          {"layer_norm_backward": Sub(LN_RETURN, "    return inv_std * grad_x_hat, grad_weight, grad_bias")}, LN_BACKWARD),
    Wrong("ln_backward_no_var_term", "grad_x subtracts the path through the mean but forgets the one through the variance",
          {"layer_norm_backward": Sub(LN_RETURN, "    return inv_std * (grad_x_hat - mean_term), grad_weight, grad_bias")},
          LN_BACKWARD),
    Wrong("ln_backward_unbiased_var", "the variance from Tensor.var's default (unbiased, divided by E - 1)",
          {"layer_norm_backward": Sub(LN_INV_STD, "    inv_std = torch.rsqrt(x.var(dim=-1, keepdim=True) + eps)")},
          LN_BACKWARD),
    Wrong("ln_backward_no_eps", "eps left out of the backward pass",
          {"layer_norm_backward": Sub(LN_INV_STD, "    inv_std = torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True))")},
          LN_BACKWARD),
    Wrong("ln_backward_param_sum_dim0", "the parameter gradients summed over the first axis only (right for 2-D x only)",
          {"layer_norm_backward": Sub(LN_PARAMS, "    grad_weight = (grad_output * x_hat).sum(dim=0)\n"
                                                 "    grad_bias = grad_output.sum(dim=0)")}, LN_BACKWARD),
    Wrong("ln_backward_by_autograd", "the gradients asked of autograd instead of derived (autograd is off in the checks)",
          {"layer_norm_backward": Replace('''
def layer_norm_backward(x, weight, grad_output, eps=1e-5):
    x = x.detach().requires_grad_(True)
    w = weight.detach().requires_grad_(True)
    b = torch.zeros_like(w, requires_grad=True)
    out = F.layer_norm(x, (x.size(-1),), w, b, eps)
    return torch.autograd.grad((out * grad_output).sum(), (x, w, b))
''')}, LN_BACKWARD),
]
ALTERNATIVES += [
    Alternative("ln_backward_compact", "the compact formula (E g - sum g - x_hat sum(g x_hat)) / (E sigma), Tensor.var "
                "with unbiased=False",
                {"layer_norm_backward": Replace('''
def layer_norm_backward(x, weight, grad_output, eps=1e-5):
    E = x.shape[-1]
    mu = x.mean(-1, keepdim=True)
    sigma = (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    xh = (x - mu) / sigma
    dxh = grad_output * weight
    dx = (E * dxh - dxh.sum(-1, keepdim=True) - xh * (dxh * xh).sum(-1, keepdim=True)) / (E * sigma)
    flat = lambda t: t.reshape(-1, E)
    return dx, (flat(grad_output) * flat(xh)).sum(0), flat(grad_output).sum(0)
''')}),
    Alternative("ln_backward_jacobian_float64", "each token's Jacobian built explicitly in float64 and applied with a "
                "batched product, the results cast back",
                {"layer_norm_backward": Replace('''
def layer_norm_backward(x, weight, grad_output, eps=1e-5):
    dtype, E = x.dtype, x.shape[-1]
    xd, w, g = x.double(), weight.double(), grad_output.double()
    mu = xd.mean(-1, keepdim=True)
    r = 1 / torch.sqrt(((xd - mu) ** 2).mean(-1, keepdim=True) + eps)
    xh = (xd - mu) * r
    eye = torch.eye(E, dtype=torch.float64)
    jac = r.unsqueeze(-1) * (eye - 1.0 / E - xh.unsqueeze(-1) * xh.unsqueeze(-2) / E)
    dx = ((g * w).unsqueeze(-2) @ jac).squeeze(-2)
    lead = list(range(xd.dim() - 1))
    gw = (g * xh).sum(dim=lead) if lead else g * xh
    gb = g.sum(dim=lead) if lead else g
    return dx.to(dtype), gw.to(dtype), gb.to(dtype)
''')}),
]
