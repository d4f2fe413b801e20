"""Gate 4 bank of 05_training: common wrong submissions (each must lose exactly its cells) and
correct alternatives in other styles (each must keep full marks)."""
from course.bank import Alternative, Replace, Sub, Wrong

LS = ["test_label_smoothing_loss_visible", "test_label_smoothing_loss_hidden"]
NOAM = ["test_noam_lr_visible", "test_noam_lr_hidden"]
TRAIN = ["test_train_epoch_visible", "test_train_epoch_hidden"]
SAMPLE = ["test_sample_visible", "test_sample_hidden"]

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
    # ---- noam_lr
    Wrong("noam_missing_embed_scale", "forgets the factor embed_dim ** -0.5",
          edits={"noam_lr": Sub("return embed_dim ** -0.5 * min(", "return min(")},
          loses=NOAM),
    Wrong("noam_warmup_power_half", "uses warmup ** -0.5 in the warm-up branch",
          edits={"noam_lr": Sub("step * warmup ** -1.5", "step * warmup ** -0.5")},
          loses=NOAM),
    # ---- train_epoch
    Wrong("train_no_zero_grad", "never zeroes the gradients (they accumulate over the batches)",
          edits={"train_epoch": Sub("        optimizer.zero_grad()\n", "")},
          loses=TRAIN),
    Wrong("train_unshifted_labels", "scores against the decoder's own input tgt[:, :-1] (unshifted target)",
          edits={"train_epoch": Sub("labels = tgt[:, 1:]", "labels = tgt[:, :-1]")},
          loses=TRAIN),
    Wrong("train_feeds_whole_target", "feeds the whole target to the decoder and scores against it",
          edits={"train_epoch": [Sub("logits = model(src, tgt[:, :-1])", "logits = model(src, tgt)"),
                                 Sub("labels = tgt[:, 1:]", "labels = tgt")]},
          loses=TRAIN),
    Wrong("train_scheduler_never_stepped", "never steps the learning-rate scheduler",
          edits={"train_epoch": Sub("        if scheduler is not None:\n            scheduler.step()\n", "")},
          loses=TRAIN),
    Wrong("train_returns_last_loss", "returns the last batch's loss instead of the mean",
          edits={"train_epoch": Sub("return total / max(count, 1)", "return loss.item()")},
          loses=TRAIN),
    # ---- sample
    Wrong("sample_top_k_plus_one", "keeps k + 1 tokens (top-k off by one)",
          edits={"sample": Sub("torch.topk(logits, top_k, dim=-1)", "torch.topk(logits, top_k + 1, dim=-1)")},
          loses=SAMPLE),
    Wrong("sample_top_k_minus_one", "keeps k - 1 tokens (top-k off by one the other way)",
          edits={"sample": Sub("torch.topk(logits, top_k, dim=-1)", "torch.topk(logits, max(top_k - 1, 1), dim=-1)")},
          loses=["test_sample_hidden"]),
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
]

ALTERNATIVES = [
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
    if step < warmup:
        return math.pow(embed_dim, -0.5) * step / math.pow(warmup, 1.5)
    return math.pow(embed_dim, -0.5) / math.sqrt(step)
'''),
                }),
    Alternative("nll_loss_and_set_to_none",
                "label smoothing from F.nll_loss; train_epoch zeroing with set_to_none and summing tensors",
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
def train_epoch(model, batches, optimizer, loss_fn, scheduler=None):
    model.train()
    losses = []
    for src, tgt in batches:
        for p in model.parameters():
            p.grad = None
        decoder_in, labels = tgt[:, :-1], tgt[:, 1:]
        out = model(src, decoder_in)
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
                "Gumbel-max sampling with the generator; top-k by sorting; model.zero_grad at the end of each step",
                edits={
                    "sample": Replace('''
@torch.no_grad()
def sample(model, prefix, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    out = prefix
    for _ in range(max_new_tokens):
        context = out if out.size(1) <= model.seq_len else out[:, out.size(1) - model.seq_len:]
        scores = model(context)[:, -1, :] / temperature
        if top_k is not None:
            sorted_scores, _ = torch.sort(scores, dim=-1, descending=True)
            scores = torch.where(scores >= sorted_scores[:, top_k - 1:top_k], scores,
                                 torch.full_like(scores, -1e30))
        u = torch.rand(scores.shape, generator=generator, device=scores.device).clamp_(1e-20, 1.0)
        gumbel = -torch.log(-torch.log(u))
        out = torch.cat([out, (scores + gumbel).argmax(dim=-1, keepdim=True)], dim=1)
    return out
'''),
                    "train_epoch": Replace('''
def train_epoch(model, batches, optimizer, loss_fn, scheduler=None):
    model.train()
    model.zero_grad()
    total, n = 0.0, 0
    for src, tgt in batches:
        logits = model(src, tgt[:, :-1])
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
                }),
    Alternative("inverse_cdf_sampler",
                "inverse-CDF sampling with torch.rand(generator) and top-k by scatter; numpy noam_lr",
                edits={
                    "sample": Replace('''
@torch.no_grad()
def sample(model, prefix, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    x = prefix.clone()
    for _ in range(max_new_tokens):
        logits = model(x[:, -model.seq_len:])[:, -1].float()
        probs = F.softmax(logits / temperature, dim=-1)
        if top_k:
            vals, idx = probs.topk(top_k, dim=-1)
            probs = torch.zeros_like(probs).scatter(-1, idx, vals)
            probs = probs / probs.sum(-1, keepdim=True)
        cdf = probs.cumsum(-1)
        u = torch.rand(x.size(0), 1, generator=generator, device=probs.device) * cdf[:, -1:]
        nxt = torch.searchsorted(cdf, u).clamp_(max=probs.size(-1) - 1)
        x = torch.cat((x, nxt.long()), dim=1)
    return x
'''),
                    "noam_lr": Replace('''
def noam_lr(step, embed_dim, warmup):
    return float(np.power(embed_dim, -0.5) * np.minimum(np.power(step, -0.5), step * np.power(warmup, -1.5)))
'''),
                }),
]
