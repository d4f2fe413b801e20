"""Gate 4 bank of 05_training: common wrong submissions (each must lose exactly its cells) and
correct alternatives in other styles (each must keep full marks)."""
from course.bank import Advised, Alternative, Replace, Sub, Wrong

LS = ["test_label_smoothing_loss_visible", "test_label_smoothing_loss_hidden"]
NOAM = ["test_noam_lr_visible", "test_noam_lr_hidden"]
TRAIN = ["test_train_epoch_visible", "test_train_epoch_hidden"]
SAMPLE = ["test_sample_visible", "test_sample_hidden"]
TOP_P = ["bonus_top_p_filter"]

WRONG = [
    # ---- label_smoothing_loss
    Wrong("ls_spread_over_v_minus_1", "spreads the smoothing mass over the V - 1 wrong classes only",
          edits={"label_smoothing_loss": Sub("uniform = -log_probs.mean(dim=-1)",
                                             "uniform = (-log_probs.sum(dim=-1) - nll) / (logits.size(-1) - 1)")},
          loses=LS),
    Wrong("ls_ignore_index_not_honoured", "averages over every position, padding included",
          edits={"label_smoothing_loss": Sub("return loss[keep].mean()", "return loss.mean()")},
          loses=LS),
    Wrong("ls_mean_over_all_positions", "leaves padding out of the sum but divides by all positions",
          edits={"label_smoothing_loss": Sub("return loss[keep].mean()", "return loss[keep].sum() / loss.numel()")},
          loses=LS),
    Wrong("ls_no_smoothing", "ignores the smoothing (plain cross-entropy)",
          edits={"label_smoothing_loss": Sub("loss = (1 - smoothing) * nll + smoothing * uniform", "loss = nll")},
          loses=LS),
    Wrong("ls_gathers_ignored_targets", "gathers with the raw targets, so an ignore_index of -100 crashes",
          edits={"label_smoothing_loss": Sub("safe_target = torch.where(keep, target, torch.zeros_like(target))",
                                             "safe_target = target")},
          loses=LS),
    Wrong("ls_calls_cross_entropy", "returns PyTorch's F.cross_entropy instead of computing the loss",
          edits={"label_smoothing_loss": Sub("    log_probs = F.log_softmax(logits, dim=-1)\n",
                                             "    return F.cross_entropy(logits, target, label_smoothing=smoothing, "
                                             "ignore_index=-100 if ignore_index is None else ignore_index)\n")},
          loses=LS),
    Advised("ls_helper_on_cpu", "builds the all-True mask on the CPU, whatever the logits' device (advice at grading: only the kernel's run on meta shows it)",
          edits={"label_smoothing_loss": Sub("keep = torch.ones_like(target, dtype=torch.bool)",
                                             "keep = torch.ones(target.shape, dtype=torch.bool)")},
          cells=LS),
    Wrong("ls_detached_uniform_term", "detaches the uniform term: the right value, but part of the gradient is lost",
          edits={"label_smoothing_loss": Sub("uniform = -log_probs.mean(dim=-1)",
                                             "uniform = -log_probs.detach().mean(dim=-1)")},
          loses=LS),
    Wrong("ls_log_of_softmax", "takes log(softmax(...)), which gives -inf (and inf loss) for logits in the hundreds",
          edits={"label_smoothing_loss": Sub("F.log_softmax(logits, dim=-1)",
                                             "torch.log(torch.softmax(logits, dim=-1))")},
          loses=LS),
    # ---- noam_lr
    Wrong("noam_returns_tensor", "returns a 0-dim tensor instead of a Python float",
          edits={"noam_lr": Sub("return embed_dim ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)",
                                "return torch.tensor(embed_dim ** -0.5 * min(step ** -0.5, step * warmup ** -1.5))")},
          loses=["test_noam_lr_visible"]),
    Wrong("noam_missing_embed_scale", "forgets the factor embed_dim ** -0.5",
          edits={"noam_lr": Sub("return embed_dim ** -0.5 * min(", "return min(")},
          loses=NOAM),
    Wrong("noam_warmup_power_half", "uses warmup ** -0.5 in the warm-up branch",
          edits={"noam_lr": Sub("step * warmup ** -1.5", "step * warmup ** -0.5")},
          loses=NOAM),
    Wrong("noam_step_zero_crashes", "computes 0 ** -0.5 at step 0 (ZeroDivisionError inside LambdaLR)",
          edits={"noam_lr": Sub("    step = max(step, 1)\n", "")},
          loses=NOAM),
    Wrong("noam_step_zero_is_zero", "returns a learning rate of 0 at step 0 instead of the rate of step 1",
          edits={"noam_lr": Sub("    step = max(step, 1)\n", "    if step == 0:\n        return 0.0\n")},
          loses=NOAM),
    # ---- train_epoch
    Wrong("train_no_zero_grad", "never zeroes the gradients (they accumulate over the batches)",
          edits={"train_epoch": Sub("        optimizer.zero_grad()\n", "")},
          loses=TRAIN),
    Wrong("train_unshifted_labels", "scores against the decoder's own input tgt[:, :-1] (unshifted target)",
          edits={"train_epoch": Sub("labels = tgt[:, 1:]", "labels = tgt[:, :-1]")},
          loses=TRAIN),
    Wrong("train_feeds_whole_target", "feeds the whole target to the decoder and scores against it",
          edits={"train_epoch": [Sub("model(src, tgt[:, :-1]", "model(src, tgt", count=2),
                                 Sub("labels = tgt[:, 1:]", "labels = tgt")]},
          loses=TRAIN),
    Wrong("train_scheduler_never_stepped", "never steps the learning-rate scheduler",
          edits={"train_epoch": Sub("        if scheduler is not None:\n            scheduler.step()\n", "")},
          loses=TRAIN),
    Wrong("train_returns_last_loss", "returns the last batch's loss instead of the mean",
          edits={"train_epoch": Sub("return total / max(n_batches, 1)", "return loss.item()")},
          loses=TRAIN),
    Wrong("train_ignores_src_pad_idx", "never passes a source mask, even when src_pad_idx is given",
          edits={"train_epoch": Sub("logits = model(src, tgt[:, :-1], src_mask=src_mask)",
                                    "logits = model(src, tgt[:, :-1])")},
          loses=TRAIN),
    Wrong("train_src_mask_inverted", "builds the source mask True at the padding",
          edits={"train_epoch": Sub("(src != src_pad_idx)", "(src == src_pad_idx)")},
          loses=TRAIN),
    Wrong("train_src_mask_flat", "passes a (B, T_src) source mask, which broadcasts against the wrong axes",
          edits={"train_epoch": Sub("(src != src_pad_idx)[:, None, None, :]", "(src != src_pad_idx)")},
          loses=TRAIN),
    Wrong("train_always_passes_mask", "passes src_mask=None to models that take no mask (Seq2SeqLM)",
          edits={"train_epoch": Sub("            logits = model(src, tgt[:, :-1])\n",
                                    "            logits = model(src, tgt[:, :-1], src_mask=None)\n")},
          loses=TRAIN),
    Wrong("train_no_model_train", "never puts the model in training mode (dropout stays off)",
          edits={"train_epoch": Sub("    model.train()\n", "")},
          loses=TRAIN),
    Wrong("train_returns_tensor", "adds up the loss tensors, so it returns a tensor (and keeps every graph alive)",
          edits={"train_epoch": Sub("total += loss.item()", "total += loss")},
          loses=TRAIN),
    Wrong("train_mean_wrong_for_one_batch", "divides by at least 2 batches, wrong for an epoch of one batch",
          edits={"train_epoch": Sub("max(n_batches, 1)", "max(n_batches, 2)")},
          loses=TRAIN),
    Wrong("train_scheduler_before_optimizer", "steps the scheduler before the optimiser",
          edits={"train_epoch": Sub("        optimizer.step()\n        if scheduler is not None:\n            scheduler.step()\n",
                                    "        if scheduler is not None:\n            scheduler.step()\n        optimizer.step()\n")},
          loses=TRAIN),
    Wrong("train_len_of_batches", "divides by len(batches), which a one-shot generator does not have",
          edits={"train_epoch": Sub("return total / max(n_batches, 1)", "return total / len(batches)")},
          loses=TRAIN),
    # ---- sample
    Wrong("sample_top_k_plus_one", "keeps k + 1 tokens (top-k off by one)",
          edits={"sample": Sub("torch.topk(logits, top_k, dim=-1)", "torch.topk(logits, top_k + 1, dim=-1)")},
          loses=SAMPLE),
    Wrong("sample_top_k_minus_one", "keeps k - 1 tokens (top-k off by one the other way)",
          edits={"sample": Sub("torch.topk(logits, top_k, dim=-1)", "torch.topk(logits, max(top_k - 1, 1), dim=-1)")},
          loses=SAMPLE),
    Wrong("sample_top_k_exactly_k", "keeps exactly k tokens by index, dropping tokens tied with the k-th logit",
          edits={"sample": Sub('''            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))''',
                               '''            idx = torch.topk(logits, top_k, dim=-1).indices
            logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, logits.gather(-1, idx))''')},
          loses=SAMPLE),
    Wrong("sample_top_k_above_vocab_crashes", "calls torch.topk with k > V (an error) instead of not restricting",
          edits={"sample": Sub(" and top_k < logits.size(-1)", "")},
          loses=SAMPLE),
    Wrong("sample_temperature_ignored", "ignores the temperature",
          edits={"sample": Sub("logits = model(x[:, -model.seq_len:])[:, -1] / temperature",
                               "logits = model(x[:, -model.seq_len:])[:, -1]")},
          loses=SAMPLE),
    Wrong("sample_no_context_crop", "feeds the whole sequence, longer than seq_len, to the model",
          edits={"sample": Sub("logits = model(x[:, -model.seq_len:])[:, -1]", "logits = model(x)[:, -1]")},
          loses=SAMPLE),
    Wrong("sample_ignores_generator", "draws with the global random state instead of the generator",
          edits={"sample": Sub("torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)")},
          loses=["test_sample_visible"]),
    Wrong("sample_greedy", "always takes the argmax instead of sampling",
          edits={"sample": Sub("next_token = torch.multinomial(probs, 1, generator=generator)",
                               "next_token = probs.argmax(dim=-1, keepdim=True)")},
          loses=SAMPLE),
    Wrong("sample_at_least_one_token", "draws one token even when max_new_tokens is 0",
          edits={"sample": Sub("for _ in range(max_new_tokens):", "for _ in range(max(max_new_tokens, 1)):")},
          loses=SAMPLE),
    Advised("sample_helper_on_cpu", "fills the dropped logits from a tensor built on the CPU, whatever the model's device (advice at grading: only the kernel's run on meta shows it)",
          edits={"sample": Sub('logits = logits.masked_fill(logits < kth, float("-inf"))',
                               'logits = torch.where(logits < kth, torch.full(logits.shape, float("-inf")), logits)')},
          cells=SAMPLE),
    # ---- top_p_filter (optional stretch)
    Wrong("top_p_drops_crossing_token", "keeps only the tokens whose running sum stays below p, dropping the one "
          "that reaches p",
          edits={"top_p_filter": Sub("before = sorted_probs.cumsum(dim=-1) - sorted_probs",
                                     "before = sorted_probs.cumsum(dim=-1)")},
          loses=TOP_P),
    Wrong("top_p_unsorted", "takes the running sum in the row's own order instead of by probability",
          edits={"top_p_filter": [Sub("sorted_probs, order = probs.sort(dim=-1, descending=True)",
                                      "sorted_probs, order = probs, torch.arange(probs.size(-1)).expand_as(probs)")]},
          loses=TOP_P),
    Wrong("top_p_top_token_can_go", "drops every token when p = 0 (the most likely token is not always kept)",
          edits={"top_p_filter": Sub("    drop_sorted[..., 0] = False", "    pass")},
          loses=TOP_P),
    Wrong("top_p_in_place", "writes the -inf into the caller's logits (masked_fill_)",
          edits={"top_p_filter": Sub('return logits.masked_fill(drop, float("-inf"))',
                                     'return logits.masked_fill_(drop, float("-inf"))')},
          loses=TOP_P),
    Wrong("top_p_returns_input", "returns the logits object itself when p >= 1 instead of a new tensor",
          edits={"top_p_filter": Sub("return logits.clone()", "return logits")},
          loses=TOP_P),
    # ---- questions
    Wrong("q1_smoothing_reaches_zero", "question 1: believes the smoothed loss, like plain cross-entropy, can reach 0",
          edits={"answer_q1": Sub("answer_q1 = 1.015", "answer_q1 = 0.0")}, loses=["test_answer_q1"]),
    Wrong("q1_eps_log_v", "question 1: eps * log(V) = 0.69, the uniform part's loss alone at a uniform model",
          edits={"answer_q1": Sub("answer_q1 = 1.015", "answer_q1 = 0.69")}, loses=["test_answer_q1"]),
    Wrong("q2_proportional_to_gradient", "question 2: believes Adam's first step is proportional to the gradient "
          "(10 / 1e-6 = 1e7)",
          edits={"answer_q2": Sub("answer_q2 = 1.0", "answer_q2 = 1e7")}, loses=["test_answer_q2"]),
    Wrong("q2_square_root", "question 2: divides by the square root of the gradient's size (sqrt(1e7) = 3162)",
          edits={"answer_q2": Sub("answer_q2 = 1.0", "answer_q2 = 3162.0")}, loses=["test_answer_q2"]),
    Wrong("q3_transposed_mask", "question 3: picks the transposed mask, which shows every later token",
          edits={"answer_q3": Sub('answer_q3 = "c"', 'answer_q3 = "a"')}, loses=["test_answer_q3"]),
    Wrong("q3_leak_in_first_layer_only", "question 3: believes a leak in the first layer is undone by a causal second layer",
          edits={"answer_q3": Sub('answer_q3 = "c"', 'answer_q3 = "d"')}, loses=["test_answer_q3"]),
]

ALTERNATIVES = [
    Alternative("masked_sum_with_item",
                "label smoothing as a masked sum divided by a count taken with .item() (meta tensors cannot run "
                ".item(): the device check must give no verdict, not a failure), helper mask built with device=",
                edits={
                    "label_smoothing_loss": Replace('''
def label_smoothing_loss(logits, target, smoothing, ignore_index=None):
    logp = logits.log_softmax(-1)
    V = logits.size(-1)
    if ignore_index is None:
        keep = torch.ones(target.shape, dtype=torch.bool, device=logits.device)
    else:
        keep = target.ne(ignore_index)
    t = target.masked_fill(~keep, 0)
    per = -(1 - smoothing) * logp.gather(1, t[:, None])[:, 0] - smoothing / V * logp.sum(-1)
    return (per * keep).sum() / keep.sum().item()
'''),
                }),
    Alternative("dense_targets_and_branches",
                "label smoothing with an explicit smoothed target distribution; noam_lr with if/else branches",
                edits={
                    "label_smoothing_loss": Replace('''
def label_smoothing_loss(logits, target, smoothing, ignore_index=None):
    V = logits.size(-1)
    keep = torch.ones_like(target, dtype=torch.bool) if ignore_index is None else target.ne(ignore_index)
    logits, target = logits[keep], target[keep]
    q = torch.full_like(logits, smoothing / V)
    q.scatter_add_(1, target[:, None], torch.full_like(logits[:, :1], 1.0 - smoothing))
    return -(q * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
'''),
                    "noam_lr": Replace('''
def noam_lr(step, embed_dim, warmup):
    if step < 1:
        step = 1
    if step < warmup:
        return math.pow(embed_dim, -0.5) * step / math.pow(warmup, 1.5)
    return math.pow(embed_dim, -0.5) / math.sqrt(step)
'''),
                }),
    Alternative("nll_loss_and_set_to_none",
                "label smoothing from F.nll_loss; train_epoch zeroing with set_to_none, a (B, 1, T) mask passed "
                "positionally, and summing tensors",
                edits={
                    "label_smoothing_loss": Replace('''
def label_smoothing_loss(logits, target, smoothing, ignore_index=None):
    logp = F.log_softmax(logits.float(), dim=-1)
    ii = -100 if ignore_index is None else ignore_index
    nll = F.nll_loss(logp, target, ignore_index=ii)
    if ignore_index is None:
        smooth = -logp.mean(dim=-1).mean()
    else:
        mask = (target != ignore_index).float()
        smooth = (-logp.mean(dim=-1) * mask).sum() / mask.sum()
    return (1.0 - smoothing) * nll + smoothing * smooth
'''),
                    "train_epoch": Replace('''
def train_epoch(model, batches, optimizer, loss_fn, scheduler=None, src_pad_idx=None):
    model.train()
    losses = []
    for src, tgt in batches:
        for p in model.parameters():
            p.grad = None
        decoder_in, labels = tgt[:, :-1], tgt[:, 1:]
        if src_pad_idx is None:
            out = model(src, decoder_in)
        else:
            out = model(src, decoder_in, src.ne(src_pad_idx).unsqueeze(1))
        loss = loss_fn(out.flatten(0, 1), labels.flatten())
        loss.backward()
        optimizer.step()
        if scheduler:
            scheduler.step()
        losses.append(loss.detach())
    return torch.stack(losses).mean().item() if losses else 0.0
'''),
                }),
    Alternative("gumbel_max_sampler",
                "Gumbel-max sampling with the generator; top-k by sorting; model.zero_grad at the end of each "
                "step with a mask built by unsqueeze; top-p with a Python loop over the rows",
                edits={
                    "sample": Replace('''
@torch.no_grad()
def sample(model, prefix, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = prefix
    for _ in range(max_new_tokens):
        context = out if out.size(1) <= model.seq_len else out[:, out.size(1) - model.seq_len:]
        scores = model(context)[:, -1, :] / temperature
        if top_k is not None:
            k = min(top_k, scores.size(-1))
            sorted_scores, _ = torch.sort(scores, dim=-1, descending=True)
            scores = torch.where(scores >= sorted_scores[:, k - 1:k], scores,
                                 torch.full_like(scores, -1e30))
        u = torch.rand(scores.shape, generator=generator, device=scores.device).clamp_(1e-20, 1.0)
        gumbel = -torch.log(-torch.log(u))
        out = torch.cat([out, (scores + gumbel).argmax(dim=-1, keepdim=True)], dim=1)
    return out
'''),
                    "train_epoch": Replace('''
def train_epoch(model, batches, optimizer, loss_fn, scheduler=None, src_pad_idx=None):
    model.train()
    model.zero_grad()
    total, n = 0.0, 0
    for src, tgt in batches:
        kwargs = {}
        if src_pad_idx is not None:
            kwargs["src_mask"] = (src != src_pad_idx).unsqueeze(1).unsqueeze(2)
        logits = model(src, tgt[:, :-1], **kwargs)
        V = logits.shape[-1]
        loss = loss_fn(logits.contiguous().view(-1, V), tgt[:, 1:].contiguous().view(-1))
        loss.backward()
        optimizer.step()
        model.zero_grad(set_to_none=True)
        if scheduler is not None:
            scheduler.step()
        total, n = total + float(loss), n + 1
    return total / n
'''),
                    "top_p_filter": Replace('''
def top_p_filter(logits, p):
    out = torch.full_like(logits, float("-inf"))
    probs = torch.softmax(logits.double(), dim=-1)
    for r in range(logits.size(0)):
        order = torch.argsort(probs[r], descending=True)
        running = 0.0
        for i in order.tolist():
            out[r, i] = logits[r, i]
            running += probs[r, i].item()
            if running >= p and p < 1:
                break
    return out
'''),
                }),
    Alternative("inverse_cdf_sampler",
                "inverse-CDF sampling with torch.rand(generator) and top-k by a threshold on probabilities; "
                "numpy noam_lr; top-p by an ascending sort",
                edits={
                    "sample": Replace('''
@torch.no_grad()
def sample(model, prefix, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    x = prefix.clone()
    for _ in range(max_new_tokens):
        logits = model(x[:, -model.seq_len:])[:, -1].float()
        probs = F.softmax(logits / temperature, dim=-1)
        if top_k and top_k < probs.size(-1):
            threshold = probs.topk(top_k, dim=-1).values[:, -1:]
            probs = torch.where(probs >= threshold, probs, torch.zeros_like(probs))
            probs = probs / probs.sum(-1, keepdim=True)
        cdf = probs.cumsum(-1)
        u = torch.rand(x.size(0), 1, generator=generator, device=probs.device) * cdf[:, -1:]
        nxt = torch.searchsorted(cdf, u).clamp_(max=probs.size(-1) - 1)
        x = torch.cat((x, nxt.long()), dim=1)
    return x
'''),
                    "noam_lr": Replace('''
def noam_lr(step, embed_dim, warmup):
    step = np.maximum(step, 1)
    return float(np.power(embed_dim, -0.5) * np.minimum(np.power(step, -0.5), step * np.power(warmup, -1.5)))
'''),
                    "top_p_filter": Replace('''
def top_p_filter(logits, p):
    if p >= 1:
        return logits.clone()
    probs = logits.softmax(-1)
    asc, idx = probs.sort(dim=-1)                      # least likely first
    tail = asc.cumsum(-1)                              # mass of this token and all less likely ones
    remove = tail <= 1 - p                             # the less likely tokens whose mass stays within 1 - p
    remove[..., -1] = False
    return logits.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
'''),
                }),
    Alternative("questions_as_expressions", "the predictions written as expressions (an entropy, an int), an answer "
                "in upper case",
                edits={"answer_q1": Sub("answer_q1 = 1.015", "answer_q1 = -(0.9001 * math.log(0.9001) + 999 * 1e-4 * math.log(1e-4))"),
                       "answer_q2": Sub("answer_q2 = 1.0", "answer_q2 = 1"),
                       "answer_q3": Sub('answer_q3 = "c"', 'answer_q3 = "C "')}),
]
