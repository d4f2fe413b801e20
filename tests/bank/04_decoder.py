"""Bank of 04_decoder (gate 4): common decoder bugs must lose the cells that test them;
correct alternatives must keep full marks."""
from course.bank import Advised, Alternative, Replace, Sub, Wrong

BLOCK = ["test_DecoderBlock_visible", "test_DecoderBlock_hidden"]
DECODER = ["test_TransformerDecoder_visible", "test_TransformerDecoder_hidden"]
MODEL = ["test_Transformer_visible", "test_Transformer_hidden"]
GREEDY = ["test_greedy_decode_visible", "test_greedy_decode_hidden"]
GPT = ["test_DecoderOnlyTransformer_visible", "test_DecoderOnlyTransformer_hidden"]
BONUS = ["bonus_beam_search"]

WRONG = [
    # ---- DecoderBlock
    Wrong("block_ignores_tgt_mask", "decoder block: masked self-attention called without the target mask",
          edits={"DecoderBlock": Sub("self.attention(x, x, x, tgt_mask)", "self.attention(x, x, x)")},
          loses=BLOCK),
    Wrong("block_seed_wiring", "a common implementation's wiring: self-attention over the encoder output, "
          "residual on the encoder stream, encoder-derived values in the cross-attention",
          edits={"DecoderBlock": Sub(
              "        x = self.norm(x + self.dropout(self.attention(x, x, x, tgt_mask)))\n"
              "        return self.transformer_block(x, enc_out, enc_out, src_mask)",
              "        value = self.norm(enc_out + self.dropout(self.attention(enc_out, enc_out, enc_out, tgt_mask)))\n"
              "        return self.transformer_block(x, enc_out, value, src_mask)")},
          loses=BLOCK),
    Wrong("block_cross_attends_target", "cross-attention reads the decoder stream instead of the encoder output",
          edits={"DecoderBlock": Sub("self.transformer_block(x, enc_out, enc_out, src_mask)",
                                     "self.transformer_block(x, x, x, tgt_mask)")},
          loses=BLOCK),
    Wrong("block_ignores_src_mask", "cross-attention without the source padding mask",
          edits={"DecoderBlock": Sub("self.transformer_block(x, enc_out, enc_out, src_mask)",
                                     "self.transformer_block(x, enc_out, enc_out)")},
          loses=BLOCK),
    Wrong("block_no_self_dropout", "the self-attention output is added back without self.dropout",
          edits={"DecoderBlock": Sub("self.norm(x + self.dropout(self.attention(x, x, x, tgt_mask)))",
                                     "self.norm(x + self.attention(x, x, x, tgt_mask))")},
          loses=BLOCK),
    Wrong("block_attention_no_dropout", "the masked self-attention is built without the dropout rate",
          edits={"DecoderBlock": Sub("MultiHeadAttention(embed_dim, n_heads, dropout=dropout)",
                                     "MultiHeadAttention(embed_dim, n_heads)")},
          loses=BLOCK),
    Wrong("block_cross_no_dropout", "the TransformerBlock (cross-attention and feed-forward) is built with its default dropout",
          edits={"DecoderBlock": Sub("TransformerBlock(embed_dim, expansion_factor, n_heads, dropout=dropout)",
                                     "TransformerBlock(embed_dim, expansion_factor, n_heads)")},
          loses=BLOCK),
    Wrong("block_default_expansion", "the TransformerBlock is built without expansion_factor (its default 4)",
          edits={"DecoderBlock": Sub("TransformerBlock(embed_dim, expansion_factor, n_heads, dropout=dropout)",
                                     "TransformerBlock(embed_dim, n_heads=n_heads, dropout=dropout)")},
          loses=BLOCK),
    # ---- TransformerDecoder
    Wrong("decoder_returns_softmax", "the decoder returns softmax probabilities instead of logits (a common implementation)",
          edits={"TransformerDecoder": Sub("return self.fc_out(x)", "return torch.softmax(self.fc_out(x), dim=-1)")},
          loses=DECODER),
    Wrong("decoder_no_positions", "the decoder forgets the positional encoding",
          edits={"TransformerDecoder": Sub("x = self.position_embedding(self.word_embedding(x))",
                                           "x = self.word_embedding(x)")},
          loses=DECODER),
    Wrong("decoder_chains_enc_out", "each decoder layer reads the previous layer's output instead of enc_out",
          edits={"TransformerDecoder": Sub("x = layer(x, enc_out, tgt_mask, src_mask)",
                                           "x, enc_out = layer(x, enc_out, tgt_mask, src_mask), x")},
          loses=DECODER),
    Wrong("decoder_positional_no_dropout", "the decoder's positional encoder is built without the dropout rate",
          edits={"TransformerDecoder": Sub("PositionalEmbedding(seq_len, embed_dim, dropout)",
                                           "PositionalEmbedding(seq_len, embed_dim)")},
          loses=DECODER),
    Wrong("decoder_blocks_default_dropout", "the decoder's blocks are built without the dropout rate",
          edits={"TransformerDecoder": Sub("DecoderBlock(embed_dim, expansion_factor, n_heads, dropout)",
                                           "DecoderBlock(embed_dim, expansion_factor, n_heads)")},
          loses=DECODER),
    # ---- Transformer
    Wrong("model_no_tgt_mask", "decoder without target mask: forward passes no causal mask to the decoder",
          edits={"Transformer": Sub("self.decoder(trg, enc_out, self.make_trg_mask(trg), src_mask)",
                                    "self.decoder(trg, enc_out, None, src_mask)")},
          loses=MODEL),
    Wrong("model_mask_hides_diagonal", "make_trg_mask hides the diagonal (a position cannot see itself)",
          edits={"Transformer": Sub("return causal_mask(trg.size(1)).to(trg.device)[None, None]",
                                    "T = trg.size(1)\n        return torch.tril(torch.ones(T, T, dtype=torch.bool), "
                                    "diagonal=-1).to(trg.device)[None, None]")},
          loses=MODEL),
    Wrong("model_src_mask_not_in_decoder", "the source padding mask reaches the encoder but not the decoder",
          edits={"Transformer": Sub("self.make_trg_mask(trg), src_mask)", "self.make_trg_mask(trg))")},
          loses=MODEL),
    Wrong("model_src_mask_not_in_encoder", "the source padding mask reaches the decoder but not the encoder",
          edits={"Transformer": Sub("enc_out = self.encoder(src, src_mask)", "enc_out = self.encoder(src)")},
          loses=MODEL),
    Wrong("model_default_num_layers", "the encoder is built with its default num_layers",
          edits={"Transformer": Sub("TransformerEncoder(seq_length, src_vocab_size, embed_dim, num_layers=num_layers,",
                                    "TransformerEncoder(seq_length, src_vocab_size, embed_dim,")},
          loses=MODEL),
    Wrong("model_decoder_default_num_layers", "the decoder is built with its default num_layers",
          edits={"Transformer": Sub("TransformerDecoder(target_vocab_size, embed_dim, seq_length, num_layers=num_layers,",
                                    "TransformerDecoder(target_vocab_size, embed_dim, seq_length,")},
          loses=MODEL),
    Advised("model_mask_on_cpu", "make_trg_mask builds the mask on the CPU whatever trg's device (advice at grading: only the kernel's run on meta shows it)",
          edits={"Transformer": Sub("return causal_mask(trg.size(1)).to(trg.device)[None, None]",
                                    "return causal_mask(trg.size(1))[None, None]")},
          cells=MODEL),
    # ---- greedy_decode
    Wrong("greedy_last_token_only", "decoding feeds back only the last predicted token (a common implementation)",
          edits={"greedy_decode": Sub(
              "        logits = model.decoder(ys, memory, model.make_trg_mask(ys), src_mask)",
              "        last = ys[:, -1:]\n"
              "        logits = model.decoder(last, memory, model.make_trg_mask(last), src_mask)")},
          loses=GREEDY),
    Wrong("greedy_batch_of_one", "decoding that works only for a batch of one (.item(), a common implementation)",
          edits={"greedy_decode": Replace('''
@torch.no_grad()
def greedy_decode(model, src, max_len, sos_idx, eos_idx, src_mask=None):
    enc_out = model.encoder(src, src_mask)
    tokens = [sos_idx]
    while len(tokens) < max_len:
        ys = torch.tensor([tokens], device=src.device)
        logits = model.decoder(ys, enc_out, model.make_trg_mask(ys), src_mask)
        tokens.append(logits[:, -1].argmax(dim=-1).item())
        if tokens[-1] == eos_idx:
            break
    return torch.tensor([tokens], device=src.device)
''')},
          loses=GREEDY),
    Wrong("greedy_no_eos_padding", "finished rows keep the model's predictions after their eos",
          edits={"greedy_decode": Sub(".argmax(dim=-1).masked_fill(done, eos_idx)", ".argmax(dim=-1)")},
          loses=GREEDY),
    Wrong("greedy_no_causal_mask", "decoding without a causal mask for the prefix",
          edits={"greedy_decode": Sub("model.decoder(ys, memory, model.make_trg_mask(ys), src_mask)",
                                      "model.decoder(ys, memory, None, src_mask)")},
          loses=GREEDY),
    Wrong("greedy_no_early_stop", "decoding always runs to max_len instead of stopping when every row has eos",
          edits={"greedy_decode": Sub("while ys.size(1) < max_len and not done.all():",
                                      "while ys.size(1) < max_len:")},
          loses=GREEDY),
    Wrong("greedy_stops_at_first_eos", "decoding stops when any row (not every row) has produced eos",
          edits={"greedy_decode": Sub("while ys.size(1) < max_len and not done.all():",
                                      "while ys.size(1) < max_len and not done.any():")},
          loses=GREEDY),
    Wrong("greedy_ignores_src_mask", "decoding ignores src_mask: the padding is read as words",
          edits={"greedy_decode": [Sub("model.encoder(src, src_mask)", "model.encoder(src)"),
                                   Sub("model.make_trg_mask(ys), src_mask)", "model.make_trg_mask(ys))")]},
          loses=GREEDY),
    Wrong("greedy_src_mask_decoder_only", "the source mask reaches the decoder's cross-attention but not the encoder",
          edits={"greedy_decode": Sub("model.encoder(src, src_mask)", "model.encoder(src)")},
          loses=GREEDY),
    Wrong("greedy_src_mask_encoder_only", "the source mask reaches the encoder but not the decoder's cross-attention",
          edits={"greedy_decode": Sub("model.make_trg_mask(ys), src_mask)", "model.make_trg_mask(ys))")},
          loses=GREEDY),
    Advised("greedy_ys_on_cpu", "ys is created on the CPU whatever src's device (advice at grading: only the kernel's run on meta shows it)",
          edits={"greedy_decode": Sub("ys = torch.full((batch, 1), sos_idx, dtype=torch.long, device=src.device)",
                                      "ys = torch.full((batch, 1), sos_idx, dtype=torch.long)")},
          cells=GREEDY),
    Advised("greedy_done_on_cpu", "the finished-rows flags are created on the CPU whatever src's device (advice at grading: only the kernel's run on meta shows it)",
          edits={"greedy_decode": Sub("done = torch.zeros(batch, dtype=torch.bool, device=src.device)",
                                      "done = torch.zeros(batch, dtype=torch.bool)")},
          cells=GREEDY),
    # ---- beam_search (optional stretch, bonus cell)
    Wrong("beam_adds_probabilities", "beam search adds probabilities instead of log-probabilities",
          edits={"beam_search": Sub("logits[:, -1].log_softmax(dim=-1)", "logits[:, -1].softmax(dim=-1)")},
          loses=BONUS),
    Wrong("beam_finished_keep_slots", "the earlier, non-standard variant: finished hypotheses keep their place in the beam, "
          "the search stops when every kept hypothesis is finished, and no length normalisation",
          edits={"beam_search": Replace('''
@torch.no_grad()
def beam_search(model, src, max_len, sos_idx, eos_idx, beam_size, src_mask=None, length_penalty=0.6):
    B, T_src = src.shape
    if src_mask is not None:
        src_mask = torch.broadcast_to(torch.as_tensor(src_mask, device=src.device), (B, 1, 1, T_src))
    best_rows = []
    for b in range(B):
        row_mask = None if src_mask is None else src_mask[b:b + 1]
        memory = model.encoder(src[b:b + 1], row_mask)
        hyps = torch.full((1, 1), sos_idx, dtype=torch.long, device=src.device)   # (k, t)
        scores = torch.zeros(1, device=src.device)                                  # (k,)
        while hyps.size(1) < max_len:
            ended = (hyps[:, 1:] == eos_idx).any(dim=1)                             # (k,)
            if bool(ended.all()):
                break
            k = hyps.size(0)
            mask_k = None if row_mask is None else row_mask.expand(k, -1, -1, -1)
            logits = model.decoder(hyps, memory.expand(k, -1, -1), model.make_trg_mask(hyps), mask_k)
            step = logits[:, -1].log_softmax(dim=-1)                                # (k, V)
            vocab = step.size(-1)
            grown = scores[:, None] + step                                          # (k, V)
            frozen = torch.full_like(grown, float("-inf"))
            frozen[:, eos_idx] = scores                      # a finished hypothesis: one candidate, same score
            candidates = torch.where(ended[:, None], frozen, grown).flatten()
            n_best = min(beam_size, int(torch.isfinite(candidates).sum()))
            scores, flat = candidates.topk(n_best)
            hyps = torch.cat([hyps[flat // vocab], (flat % vocab)[:, None]], dim=1)
        row = hyps[scores.argmax()].tolist()
        if eos_idx in row[1:]:
            row = row[: row.index(eos_idx, 1) + 1]
        best_rows.append(row)
    width = max(len(row) for row in best_rows)
    padded = [row + [eos_idx] * (width - len(row)) for row in best_rows]
    return torch.tensor(padded, dtype=torch.long, device=src.device)
''')},
          loses=BONUS),
    Wrong("beam_no_length_penalty", "beam search without length normalisation (wrong whenever length_penalty > 0)",
          edits={"beam_search": Sub("return ((5 + size) / 6) ** length_penalty", "return 1.0")},
          loses=BONUS),
    Wrong("beam_sos_in_length", "the length penalty counts <sos> in |Y|",
          edits={"beam_search": Sub("return ((5 + size) / 6) ** length_penalty", "return ((6 + size) / 6) ** length_penalty")},
          loses=BONUS),
    Wrong("beam_every_eos_finishes", "every candidate ending in eos finishes, not only those among the beam_size best",
          edits={"beam_search": Sub("order[:beam_size][ends[:beam_size]]", "order[ends]")},
          loses=BONUS),
    Wrong("beam_live_always_join", "the live hypotheses join the finished list also when beam_size are already finished",
          edits={"beam_search": Sub("        if len(finished) < beam_size:\n", "        if True:\n")},
          loses=BONUS),
    Wrong("beam_ignores_src_mask", "beam search ignores the source mask",
          edits={"beam_search": Sub("row_mask = None if src_mask is None else src_mask[b:b + 1]", "row_mask = None")},
          loses=BONUS),
    Wrong("beam_mask_not_broadcast", "beam search takes row b of src_mask without broadcasting it to (B, 1, 1, T_src)",
          edits={"beam_search": Sub("src_mask = torch.broadcast_to(torch.as_tensor(src_mask, device=src.device), (B, 1, 1, T_src))",
                                    "src_mask = torch.as_tensor(src_mask, device=src.device)")},
          loses=BONUS),
    # ---- DecoderOnlyTransformer
    Wrong("gpt_no_causal_mask", "a decoder-only model with no causal mask",
          edits={"DecoderOnlyTransformer": Sub("h = layer(h, h, h, mask)", "h = layer(h, h, h)")},
          loses=GPT),
    Wrong("gpt_mask_hides_diagonal", "a causal mask that hides the diagonal (strictly lower triangular)",
          edits={"DecoderOnlyTransformer": Sub(
              "mask = causal_mask(x.size(1)).to(x.device)",
              "mask = torch.tril(torch.ones(x.size(1), x.size(1), dtype=torch.bool, device=x.device), diagonal=-1)")},
          loses=GPT),
    Wrong("gpt_softmax", "the decoder-only model returns probabilities",
          edits={"DecoderOnlyTransformer": Sub("return self.fc_out(h)", "return self.fc_out(h).softmax(dim=-1)")},
          loses=GPT),
    Advised("gpt_mask_on_cpu", "the causal mask is built on the CPU whatever x's device (advice at grading: only the kernel's run on meta shows it)",
          edits={"DecoderOnlyTransformer": Sub("mask = causal_mask(x.size(1)).to(x.device)", "mask = causal_mask(x.size(1))")},
          cells=GPT),
    Wrong("gpt_positional_no_dropout", "the positional encoder is built without the dropout rate",
          edits={"DecoderOnlyTransformer": Sub("PositionalEmbedding(seq_len, embed_dim, dropout=dropout)",
                                               "PositionalEmbedding(seq_len, embed_dim)")},
          loses=GPT),
    Wrong("gpt_blocks_default_dropout", "the blocks are built without the dropout rate",
          edits={"DecoderOnlyTransformer": Sub("TransformerBlock(embed_dim, expansion_factor, n_heads, dropout=dropout)",
                                               "TransformerBlock(embed_dim, expansion_factor, n_heads)")},
          loses=GPT),
    # ---- gradients: right outputs, a part cut from the graph
    Wrong("block_residual_detached", "a stop-gradient on the self-attention sublayer's residual (x.detach() + ...): the "
          "output is right and every parameter still gets a gradient, but the gradient with respect to x is not "
          "nn.TransformerDecoderLayer's",
          edits={"DecoderBlock": Sub("x = self.norm(x + self.dropout(self.attention(x, x, x, tgt_mask)))",
                                     "x = self.norm(x.detach() + self.dropout(self.attention(x, x, x, tgt_mask)))")},
          loses=BLOCK),
    Wrong("block_enc_out_detached", "the cross-attention reads enc_out.detach(): right outputs, every parameter of the "
          "block gets a gradient, but none reaches enc_out (the encoder below would never learn)",
          edits={"DecoderBlock": Sub("self.transformer_block(x, enc_out, enc_out, src_mask)",
                                     "self.transformer_block(x, enc_out.detach(), enc_out.detach(), src_mask)")},
          loses=BLOCK),
    Wrong("decoder_enc_out_detached", "the decoder passes enc_out.detach() to its blocks: right logits, every decoder "
          "parameter gets a gradient, none reaches enc_out",
          edits={"TransformerDecoder": Sub("x = layer(x, enc_out, tgt_mask, src_mask)",
                                           "x = layer(x, enc_out.detach(), tgt_mask, src_mask)")},
          loses=DECODER),
    Wrong("gpt_keys_values_detached", "the decoder-only model detaches the keys and values it passes to each block: right "
          "logits, every parameter gets a gradient, but the embeddings' (and earlier blocks') gradients are wrong",
          edits={"DecoderOnlyTransformer": Sub("h = layer(h, h, h, mask)", "h = layer(h, h.detach(), h.detach(), mask)")},
          loses=GPT),
    # ---- questions
    Wrong("q1_no_future_leak_confusion", "question 1 answered with the future-leak option",
          edits={"answer_q1": Sub('answer_q1 = "d"', 'answer_q1 = "c"')}, loses=["test_answer_q1"]),
    Wrong("q2_paper_count", "question 2 answered with the paper's 65 million (its 37,000-token vocabulary, not ours)",
          edits={"answer_q2": Sub("answer_q2 = 44.2", "answer_q2 = 65")}, loses=["test_answer_q2"]),
    Wrong("q2_encoder_only_count", "question 2 counted only the encoder (6 blocks of 3.15 million)",
          edits={"answer_q2": Sub("answer_q2 = 44.2", "answer_q2 = 18.9")}, loses=["test_answer_q2"]),
    Wrong("q3_zero_output", "question 3: believes an all-zero enc_out gives a zero cross-attention output "
          "(forgets the biases of the key, value and output projections)",
          edits={"answer_q3": Sub('answer_q3 = "b"', 'answer_q3 = "a"')}, loses=["test_answer_q3"]),
    Wrong("q3_nan", "question 3: believes all-equal scores make the softmax divide by zero",
          edits={"answer_q3": Sub('answer_q3 = "b"', 'answer_q3 = "c"')}, loses=["test_answer_q3"]),
    Wrong("q4_same_convention", "question 4: believes PyTorch reads True as 'may attend' (no NaN anywhere)",
          edits={"answer_q4": Sub('answer_q4 = 7', 'answer_q4 = 0')}, loses=["test_answer_q4"]),
    Wrong("q4_last_row_only", "question 4: only the last position (no key left in the first layer), forgetting that "
          "the second layer's self-attention reads it",
          edits={"answer_q4": Sub('answer_q4 = 7', 'answer_q4 = 1')}, loses=["test_answer_q4"]),
]

ALTERNATIVES = [
    Alternative("block_keyword_style", "decoder block written with keyword arguments and explicit steps",
                edits={"DecoderBlock": Sub(
                    "        x = self.norm(x + self.dropout(self.attention(x, x, x, tgt_mask)))\n"
                    "        return self.transformer_block(x, enc_out, enc_out, src_mask)",
                    "        attended = self.attention(query=x, key=x, value=x, mask=tgt_mask)\n"
                    "        x1 = self.norm(self.dropout(attended) + x)\n"
                    "        out = self.transformer_block(query=x1, key=enc_out, value=enc_out, mask=src_mask)\n"
                    "        return out")}),
    Alternative("decoder_plain_embedding", "nn.Embedding (initialised as notebook 01's Embedding) as the word embedding and an index loop over the layers",
                edits={"TransformerDecoder": [
                    Sub("self.word_embedding = Embedding(target_vocab_size, embed_dim)",
                        "self.word_embedding = nn.Embedding(target_vocab_size, embed_dim)\n"
                        "        nn.init.normal_(self.word_embedding.weight, std=embed_dim ** -0.5)  # as notebook 01"),
                    Sub("        for layer in self.layers:\n            x = layer(x, enc_out, tgt_mask, src_mask)",
                        "        for i in range(len(self.layers)):\n"
                        "            x = self.layers[i](x, enc_out, tgt_mask=tgt_mask, src_mask=src_mask)")]}),
    Alternative("model_seed_style_mask", "make_trg_mask as in a common implementation: 0/1 floats expanded to (B, 1, T, T)",
                edits={"Transformer": Sub(
                    "return causal_mask(trg.size(1)).to(trg.device)[None, None]",
                    "batch_size, trg_len = trg.shape\n"
                    "        return torch.tril(torch.ones(trg_len, trg_len, device=trg.device)).expand(\n"
                    "            batch_size, 1, trg_len, trg_len)")}),
    Alternative("greedy_loop_over_rows", "greedy decoding with a python loop over the rows, then eos padding",
                edits={"greedy_decode": Replace('''
@torch.no_grad()
def greedy_decode(model, src, max_len, sos_idx, eos_idx, src_mask=None):
    rows = []
    for i in range(src.size(0)):
        row_mask = None
        if src_mask is not None:
            row_mask = torch.broadcast_to(torch.as_tensor(src_mask), (src.size(0), 1, 1, src.size(1)))[i:i + 1]
        enc_out = model.encoder(src[i:i + 1], row_mask)
        row = [sos_idx]
        while len(row) < max_len and row[-1] != eos_idx:
            ys = torch.tensor([row], device=src.device)
            logits = model.decoder(ys, enc_out, causal_mask(len(row)).to(src.device), row_mask)
            row.append(int(logits[0, -1].argmax()))
        rows.append(row)
    width = max(len(row) for row in rows)
    return torch.tensor([row + [eos_idx] * (width - len(row)) for row in rows], device=src.device)
''')}),
    Alternative("greedy_calls_forward", "greedy decoding through model(src, ys, src_mask) with torch.where for finished rows",
                edits={"greedy_decode": Replace('''
@torch.no_grad()
def greedy_decode(model, src, max_len, sos_idx, eos_idx, src_mask=None):
    B = src.shape[0]
    ys = torch.full((B, 1), sos_idx, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len - 1):
        if bool(done.all()):
            break
        best = model(src, ys, src_mask)[:, -1, :].argmax(-1)
        best = torch.where(done, torch.full_like(best, eos_idx), best)
        ys = torch.cat((ys, best[:, None]), dim=1)
        done = done | (best == eos_idx)
    return ys
''')}),
    Alternative("beam_lists", "beam search with python lists of (score, tokens), one decoder call per hypothesis, sorted()",
                edits={"beam_search": Replace('''
@torch.no_grad()
def beam_search(model, src, max_len, sos_idx, eos_idx, beam_size, src_mask=None, length_penalty=0.6):
    results = []
    for b in range(src.size(0)):
        mask = None
        if src_mask is not None:
            mask = torch.broadcast_to(src_mask, (src.size(0), 1, 1, src.size(1)))[b:b + 1]
        enc_out = model.encoder(src[b:b + 1], mask)
        beam, done = [(0.0, [sos_idx])], []
        while len(done) < beam_size and len(beam[0][1]) < max_len:
            candidates = []
            for score, seq in beam:
                ys = torch.tensor([seq], device=src.device)
                logits = model.decoder(ys, enc_out, causal_mask(len(seq)).to(src.device), mask)[0, -1]
                for token, lp in enumerate(torch.log_softmax(logits, dim=-1).tolist()):
                    candidates.append((score + lp, seq + [token]))
            candidates = sorted(candidates, key=lambda c: c[0], reverse=True)
            done.extend(c for c in candidates[:beam_size] if c[1][-1] == eos_idx)
            beam = [c for c in candidates if c[1][-1] != eos_idx][:beam_size]
        if len(done) < beam_size:
            done.extend(beam)
        best = max(done, key=lambda c: c[0] / ((5 + len(c[1]) - 1) / 6) ** length_penalty)
        results.append(best[1])
    width = max(len(r) for r in results)
    return torch.tensor([r + [eos_idx] * (width - len(r)) for r in results], device=src.device)
''')}),
    Alternative("gpt_triu_mask", "decoder-only mask built with torch.triu(..., 1) == 0",
                edits={"DecoderOnlyTransformer": Sub(
                    "mask = causal_mask(x.size(1)).to(x.device)",
                    "T = x.size(1)\n        mask = torch.triu(torch.ones(T, T, device=x.device), 1) == 0")}),
    Alternative("answers_uppercase", "answers written in upper case with spaces",
                edits={"answer_q1": Sub('answer_q1 = "d"', 'answer_q1 = " D "'),
                       "answer_q2": Sub("answer_q2 = 44.2", "answer_q2 = 44_155_403 / 1e6"),
                       "answer_q3": Sub('answer_q3 = "b"', 'answer_q3 = "B"'),
                       "answer_q4": Sub('answer_q4 = 7', 'answer_q4 = 7.0')}),
    Alternative("q2_rounded_prediction", "question 2: a rounded prediction within the stated 10%",
                edits={"answer_q2": Sub("answer_q2 = 44.2", "answer_q2 = 40")}),
]

# Exercise 6, FixedDecoderLayer (issue 36: a debug exercise): each entry leaves one of the colleague's bugs in, or
# fixes one the wrong way.
FIXED = ["test_FixedDecoderLayer_visible", "test_FixedDecoderLayer_hidden"]
WRONG += [
    Wrong("debug_mask_sees_next", "the causal mask left as the colleague wrote it: tril(diagonal=1), so position t "
          "also reads target position t + 1",
          {"FixedDecoderLayer": Sub("dtype=torch.bool, device=device))", "dtype=torch.bool, device=device), diagonal=1)")},
          FIXED),
    Wrong("debug_mask_hides_self", "the causal mask over-corrected to a strictly lower triangle: position t cannot read "
          "itself (position 0 has no key)",
          {"FixedDecoderLayer": Sub("dtype=torch.bool, device=device))", "dtype=torch.bool, device=device), diagonal=-1)")},
          FIXED),
    Wrong("debug_cross_reads_target", "the cross-attention left reading the target stream as its keys and values",
          {"FixedDecoderLayer": Sub("self.multihead_attn(x, enc_out, enc_out,", "self.multihead_attn(x, x, x,")},
          FIXED),
    Wrong("debug_source_padding_on_target", "the source padding mask left on the target's self-attention as well",
          {"FixedDecoderLayer": Sub("return ~allowed, None, (None if src_real is None else ~src_real)",
                                    "padding = None if src_real is None else ~src_real\n"
                                    "        return ~allowed, padding, padding")},
          FIXED),
    Wrong("debug_cross_padding_dropped", "the source padding removed from the self-attention and from the "
          "cross-attention too: padded source vectors are read",
          {"FixedDecoderLayer": Sub("return ~allowed, None, (None if src_real is None else ~src_real)",
                                    "return ~allowed, None, None")},
          FIXED),
]
ALTERNATIVES += [
    Alternative("debug_library_forward", "the fix through nn.TransformerDecoderLayer's own forward, given PyTorch's "
                "masks (a float causal mask from generate_square_subsequent_mask)",
                {"FixedDecoderLayer": Replace('''
class FixedDecoderLayer(ColleagueDecoderLayer):
    def forward(self, x, enc_out, src_real=None):
        blocked = nn.Transformer.generate_square_subsequent_mask(x.size(1), device=x.device)
        padding = None if src_real is None else src_real.logical_not()
        return nn.TransformerDecoderLayer.forward(self, x, enc_out, tgt_mask=blocked,
                                                  memory_key_padding_mask=padding)
''')}),
    Alternative("debug_class_rewritten", "the class written anew from nn.TransformerDecoderLayer, one forward with "
                "every step explicit",
                {"FixedDecoderLayer": Replace('''
class FixedDecoderLayer(nn.TransformerDecoderLayer):
    def __init__(self, embed_dim, n_heads, dim_feedforward, dropout=0.0):
        super().__init__(embed_dim, n_heads, dim_feedforward, dropout, batch_first=True)

    def forward(self, x, enc_out, src_real=None):
        T = x.size(1)
        steps = torch.arange(T, device=x.device)
        future = steps[None, :] > steps[:, None]
        pad = None if src_real is None else ~src_real.bool()
        h = self.self_attn(x, x, x, attn_mask=future, need_weights=False)[0]
        x = self.norm1(x + self.dropout1(h))
        h = self.multihead_attn(x, enc_out, enc_out, key_padding_mask=pad, need_weights=False)[0]
        x = self.norm2(x + self.dropout2(h))
        return self.norm3(x + self.dropout3(self.linear2(self.dropout(F.relu(self.linear1(x))))))
''')}),
]
