"""Gate 4 bank of 09_reinforcement_learning: common wrong submissions (each must lose exactly its cells) and correct
alternatives in other styles (each must keep full marks).

The experiments call every exercise, but only the test cells grade, and each exercise's checks call only that
exercise (the loss's checks use their own log-probabilities, sample_group's its own small model), so a wrong
function costs only its own cells. The checks are judged outside the kernel on inputs drawn afresh at each grading
(course/judge.py); each verdict below holds for every seed: the visible verify check cycles through every kind of
reply, sample_group's checks raise the end id's logit so that rows end (and, in one hidden case, all end at once),
and the visible grpo_loss check has a row clipped on each side and a row of one token.
"""
from course.bank import Alternative, Replace, Sub, Wrong

VERIFY = ["test_verify_visible", "test_verify_hidden"]
SAMPLE = ["test_sample_group_visible", "test_sample_group_hidden"]
LOGP = ["test_completion_logprobs_visible", "test_completion_logprobs_hidden"]
ADV = ["test_group_advantages_visible", "test_group_advantages_hidden"]
LOSS = ["test_grpo_loss_visible", "test_grpo_loss_hidden"]
BONUS = ["bonus_pass_at_k"]

WRONG = [
    # ---- verify
    Wrong("verify_raises_on_unspellable", "decodes without a guard: an id the tokenizer cannot spell (08's "
          "<|endoftext|>, 512) raises instead of scoring 0",
          edits={"verify": Sub("    try:\n        text = decode(reply)\n    except Exception:\n        return 0.0\n",
                               "    text = decode(reply)\n")},
          loses=VERIFY),
    Wrong("verify_extra_text_ok", "accepts a reply that starts with the answer (extra text after it is ignored)",
          edits={"verify": Sub("return 1.0 if text.strip() == answer else 0.0",
                               "return 1.0 if text.strip().startswith(answer) else 0.0")},
          loses=VERIFY),
    Wrong("verify_answer_anywhere", "accepts a reply that contains the answer anywhere",
          edits={"verify": Sub("return 1.0 if text.strip() == answer else 0.0",
                               "return 1.0 if answer in text else 0.0")},
          loses=VERIFY),
    Wrong("verify_no_cut", "does not cut the reply at its end token (the end id is then a chat token: wrong)",
          edits={"verify": Sub("reply = reply_ids[:reply_ids.index(end_id)] if end_id in reply_ids else reply_ids", "reply = reply_ids")},
          loses=VERIFY),
    Wrong("verify_drops_chat_tokens", "drops chat tokens from the reply instead of scoring it wrong",
          edits={"verify": Sub("    if any(token >= base_vocab for token in reply):\n        return 0.0\n",
                               "    reply = [token for token in reply if token < base_vocab]\n")},
          loses=VERIFY),
    Wrong("verify_chat_boundary", "tests chat tokens with `token > base_vocab`: the first chat id (base_vocab itself, "
          "which this decoder spells as nothing) passes as ordinary text",
          edits={"verify": Sub("if any(token >= base_vocab for token in reply):", "if any(token > base_vocab for token in reply):")},
          loses=VERIFY),
    Wrong("verify_no_strip", "compares the decoded text without removing the spaces around it",
          edits={"verify": Sub("return 1.0 if text.strip() == answer else 0.0",
                               "return 1.0 if text == answer else 0.0")},
          loses=VERIFY),
    Wrong("verify_returns_bool", "returns the comparison itself (a bool) instead of a float reward",
          edits={"verify": Sub("return 1.0 if text.strip() == answer else 0.0", "return text.strip() == answer")},
          loses=VERIFY),
    # ---- sample_group
    Wrong("sample_mask_excludes_end", "the mask stops before each row's end token (the model never learns to stop)",
          edits={"sample_group": [Sub("        tokens.append((drawn, alive.clone()))\n        alive &= drawn != end_id\n",
                                      "        alive &= drawn != end_id\n        tokens.append((drawn, alive.clone()))\n")]},
          loses=SAMPLE),
    Wrong("sample_finished_rows_keep_sampling", "a finished row keeps the tokens drawn for it instead of the end id",
          edits={"sample_group": Sub("        drawn[~alive] = end_id\n", "")},
          loses=SAMPLE),
    Wrong("sample_no_early_stop", "always decodes max_new_tokens steps, after every row has ended",
          edits={"sample_group": Sub("        if not alive.any():\n            break\n", "")},
          loses=SAMPLE),
    Wrong("sample_ignores_temperature", "samples at temperature 1 whatever the argument",
          edits={"sample_group": Sub("probs = (last.float().cpu() / temperature).softmax(-1)",
                                     "probs = last.float().cpu().softmax(-1)")},
          loses=SAMPLE),
    Wrong("sample_ignores_context", "decodes max_new_tokens steps even when the prompt leaves less room in the context",
          edits={"sample_group": Sub("steps = min(max_new_tokens, model.seq_len - len(prompt))", "steps = max_new_tokens")},
          loses=SAMPLE),
    Wrong("sample_global_rng", "draws with the global random generator instead of the one given",
          edits={"sample_group": Sub("torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)")},
          loses=SAMPLE),
    Wrong("sample_greedy", "takes the most likely token (argmax) instead of sampling",
          edits={"sample_group": Sub("drawn = torch.multinomial(probs, 1, generator=generator).view(G)",
                                     "drawn = probs.argmax(-1)")},
          loses=SAMPLE),
    # ---- completion_logprobs
    Wrong("logprobs_no_shift", "reads the logits at the token's own position (no shift by one)",
          edits={"completion_logprobs": Sub("where = sizes[:, None] - 1 + torch.arange(L)[None, :]",
                                            "where = sizes[:, None] + torch.arange(L)[None, :]")},
          loses=LOGP),
    Wrong("logprobs_longest_prompt", "reads every row at the longest prompt's positions (as if the prompts were "
          "left-padded)",
          edits={"completion_logprobs": Sub("where = sizes[:, None] - 1 + torch.arange(L)[None, :]",
                                            "where = sizes.max() - 1 + torch.arange(L)[None, :].expand(B, L)")},
          loses=LOGP),
    Wrong("logprobs_detached", "returns the log-probabilities without their graph (computed under no_grad)",
          edits={"completion_logprobs": Sub("logits = model(ids)[0]",
                                            "with torch.no_grad():\n        logits = model(ids)[0]")},
          loses=LOGP),
    Wrong("logprobs_probabilities", "returns probabilities (softmax) instead of log-probabilities",
          edits={"completion_logprobs": Sub(".float().log_softmax(-1)", ".float().softmax(-1)")},
          loses=LOGP),
    # ---- group_advantages
    Wrong("advantages_biased_std", "divides by the biased standard deviation (unbiased=False)",
          edits={"group_advantages": Sub("rewards.std(1, keepdim=True)", "rewards.std(1, unbiased=False, keepdim=True)")},
          loses=ADV),
    Wrong("advantages_no_eps", "divides by the standard deviation alone: an all-equal group gets 0 / 0 = nan",
          edits={"group_advantages": Sub("(rewards.std(1, keepdim=True) + eps)", "rewards.std(1, keepdim=True)")},
          loses=ADV),
    Wrong("advantages_batch_mean", "subtracts the mean of the whole batch instead of each group's",
          edits={"group_advantages": Sub("centred = rewards - rewards.mean(1, keepdim=True)", "centred = rewards - rewards.mean()")},
          loses=ADV),
    Wrong("advantages_always_scaled", "divides by the standard deviation even with scale_by_std=False",
          edits={"group_advantages": Sub("    if scale_by_std:\n", "    if True:\n")},
          loses=ADV),
    Wrong("advantages_eps_ignored", "uses a fixed 1e-4 instead of the eps argument",
          edits={"group_advantages": Sub("(rewards.std(1, keepdim=True) + eps)", "(rewards.std(1, keepdim=True) + 1e-4)")},
          loses=ADV),
    # ---- grpo_loss
    Wrong("loss_ratio_inverted", "the ratio is old over new (exp(old_logp - logp))",
          edits={"grpo_loss": Sub("ratio = (logp - old_logp).exp()", "ratio = (old_logp - logp).exp()")},
          loses=LOSS),
    Wrong("loss_k3_sign", "k3 with the difference the wrong way round (exp(logp - ref) - (logp - ref) - 1)",
          edits={"grpo_loss": Sub("gap = ref_logp - logp", "gap = logp - ref_logp")},
          loses=LOSS),
    Wrong("loss_clip_upper_only", "clips the ratio from above only",
          edits={"grpo_loss": Sub("ratio.clamp(1 - clip_eps, 1 + clip_eps)", "ratio.clamp(max=1 + clip_eps)")},
          loses=LOSS),
    Wrong("loss_max_not_min", "takes the larger of the clipped and unclipped terms (optimistic instead of pessimistic)",
          edits={"grpo_loss": Sub("per_token = -torch.minimum(", "per_token = -torch.maximum(")},
          loses=LOSS),
    Wrong("loss_sequence_over_all_positions", "'sequence' divides each row's sum by the padded length L, not by its "
          "counted tokens",
          edits={"grpo_loss": Sub("return (per_token.sum(1) / mask.sum(1)).mean()",
                                  "return (per_token.sum(1) / mask.size(1)).mean()")},
          loses=LOSS),
    Wrong("loss_token_is_sequence", "'token' takes the mean of the rows' means (DeepSeekMath's) instead of one mean "
          "over all tokens",
          edits={"grpo_loss": Sub("return per_token.sum() / mask.sum()", "return (per_token.sum(1) / mask.sum(1)).mean()")},
          loses=LOSS),
    Wrong("loss_mask_multiplied", "applies the mask by multiplying (an inf or nan outside it turns the loss into nan)",
          edits={"grpo_loss": Sub("per_token = torch.where(mask, per_token, torch.zeros_like(per_token))",
                                  "per_token = per_token * mask")},
          loses=LOSS),
    Wrong("loss_constant_ignores_max_len", "'constant' always divides by B * L, ignoring max_len",
          edits={"grpo_loss": Sub("(mask.size(1) if max_len is None else max_len)", "mask.size(1)")},
          loses=LOSS),
    Wrong("loss_kl_when_beta_zero", "computes the KL term even when beta is 0 (fails when ref_logp is None)",
          edits={"grpo_loss": Sub("    if beta != 0:\n", "    if True:\n")},
          loses=LOSS),
    Wrong("loss_unknown_aggregation_silent", "an unknown aggregation silently falls back to 'constant'",
          edits={"grpo_loss": Sub('    if aggregation not in ("sequence", "token", "constant"):\n', "    if False:\n")},
          loses=LOSS),
    Wrong("loss_sign_flipped", "maximises instead of minimising (returns the objective, not its negative)",
          edits={"grpo_loss": Sub("per_token = -torch.minimum(", "per_token = torch.minimum(")},
          loses=LOSS),
    # ---- pass_at_k (bonus)
    Wrong("pass_at_k_with_replacement", "1 - (1 - c/n)^k: samples with replacement (biased for k > 1)",
          edits={"pass_at_k": Sub("return 1.0 - math.comb(n - c, k) / math.comb(n, k)", "return 1.0 - (1 - c / n) ** k")},
          loses=BONUS),
    Wrong("pass_at_k_is_pass_at_1", "c / n whatever k",
          edits={"pass_at_k": Replace("def pass_at_k(n, c, k):\n    return c / n")},
          loses=BONUS),
    # ---- predictions
    Wrong("q1_no_scaling", "Q1 without the division by the spread (0.875 / 0.5)",
          edits={"answer_q1": Sub("answer_q1 = 2.65", "answer_q1 = 1.75")},
          loses=["test_answer_q1"]),
    Wrong("q1_one_advantage", "Q1 answered with the advantage of X's right reply instead of the ratio",
          edits={"answer_q1": Sub("answer_q1 = 2.65", "answer_q1 = 2.47")},
          loses=["test_answer_q1"]),
    Wrong("q1_inverted", "Q1 as Y's advantage over X's",
          edits={"answer_q1": Sub("answer_q1 = 2.65", "answer_q1 = 0.38")},
          loses=["test_answer_q1"]),
    Wrong("q2_sequence_mean", "Q2 with the mean of each reply's mean (the 'sequence' aggregation)",
          edits={"answer_q2": Sub("answer_q2 = 0.5", "answer_q2 = 0.0")},
          loses=["test_answer_q2"]),
    Wrong("q3_pushes_down", "Q3: an all-wrong group pushes its replies down",
          edits={"answer_q3": Sub('answer_q3 = "c"', 'answer_q3 = "a"')},
          loses=["test_answer_q3"]),
]

ALTERNATIVES = [
    Alternative("answers_as_expressions", "the predictions written as the computations that give them",
                edits={"answer_q1": Sub("answer_q1 = 2.65", "answer_q1 = ((7 / 8) / ((7 / 64) * 8 / 7) ** 0.5)"
                                                            " / ((1 / 2) / ((1 / 4) * 8 / 7) ** 0.5)"),
                       "answer_q2": Sub("answer_q2 = 0.5", "answer_q2 = (-1 * 1 + 1 * 3) / 4"),
                       "answer_q3": Sub('answer_q3 = "c"', 'answer_q3 = "C"')}),
    Alternative("preallocated_styles",
                "verify with a loop and a flag; sample_group into preallocated tensors with torch.where; the log-"
                "probabilities from cross_entropy's per-token losses; advantages from a hand-written unbiased std (no "
                "explicit zero: 0 / eps is exactly 0); the loss with masked_fill and per-row loops (TRL's form); "
                "pass@k in Chen et al.'s product form",
                edits={
                    "verify": Replace('''
def verify(reply_ids, answer, decode, end_id, base_vocab):
    kept = []
    for token in reply_ids:
        if token == end_id:
            break
        if token >= base_vocab:
            return 0.0
        kept.append(token)
    try:
        return float(decode(kept).strip() == answer)
    except Exception:
        return 0.0
'''),
                    "sample_group": Replace('''
@torch.no_grad()
def sample_group(model, prompt, G, max_new_tokens, end_id, temperature=1.0, generator=None):
    model.eval()
    room = min(max_new_tokens, model.seq_len - len(prompt))
    logits, past = model(torch.tensor([prompt]))
    past = [(k.expand(G, -1, -1, -1), v.expand(G, -1, -1, -1)) for k, v in past]
    logits = logits[:, -1].expand(G, -1)
    out = torch.full((G, room), end_id, dtype=torch.long)
    mask = torch.zeros(G, room, dtype=torch.bool)
    done = torch.zeros(G, dtype=torch.bool)
    for t in range(room):
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, end_id), nxt)
        out[:, t], mask[:, t] = nxt, ~done
        done = done | (nxt == end_id)
        if bool(done.all()):
            return out[:, :t + 1], mask[:, :t + 1]
        if t + 1 < room:
            logits, past = model(nxt[:, None], past=past)
            logits = logits[:, -1]
    return out, mask
'''),
                    "completion_logprobs": Replace('''
def completion_logprobs(model, prompts, completions):
    B, L = completions.shape
    T = max(len(p) for p in prompts) + L
    ids = torch.zeros(B, T, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, :len(p) + L] = torch.cat([torch.tensor(p, dtype=torch.long), completions[b]])
    logits = model(ids)[0]
    picked = torch.stack([logits[b, len(p) - 1:len(p) - 1 + L] for b, p in enumerate(prompts)])
    nll = F.cross_entropy(picked.float().reshape(B * L, -1), completions.reshape(-1), reduction="none")
    return -nll.view(B, L)
'''),
                    "group_advantages": Replace('''
def group_advantages(rewards, scale_by_std=True, eps=1e-4):
    G = rewards.size(1)
    mean = rewards.sum(1, keepdim=True) / G
    out = rewards - mean
    if scale_by_std:
        std = ((out ** 2).sum(1, keepdim=True) / (G - 1)).sqrt()
        out = out / (std + eps)
    return out
'''),
                    "grpo_loss": Replace('''
def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip_eps=0.2, beta=0.04, aggregation="sequence",
              max_len=None):
    coef_1 = torch.exp(logp - old_logp)
    coef_2 = torch.clamp(coef_1, 1 - clip_eps, 1 + clip_eps)
    per_token_loss = -torch.min(coef_1 * advantages.unsqueeze(1), coef_2 * advantages.unsqueeze(1))
    if beta:
        per_token_loss = per_token_loss + beta * (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1)
    per_token_loss = per_token_loss.masked_fill(~mask, 0.0)
    if aggregation == "sequence":
        rows = [per_token_loss[b].sum() / mask[b].sum() for b in range(mask.size(0))]
        return torch.stack(rows).mean()
    elif aggregation == "token":
        return per_token_loss.sum() / mask.sum()
    elif aggregation == "constant":
        return per_token_loss.sum() / (mask.size(0) * (max_len or mask.size(1)))
    raise ValueError(aggregation)
'''),
                    "pass_at_k": Replace('''
def pass_at_k(n, c, k):
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod
'''),
                }),
    Alternative("negated_max_styles",
                "verify with a while loop over the reply; advantages from torch.std_mean; the loss as the max of the "
                "negated objectives, the k3 term with expm1, the mask applied with Tensor.where and a float mask for the "
                "counts",
                edits={
                    "verify": Replace('''
def verify(reply_ids, answer, decode, end_id, base_vocab):
    i = 0
    while i < len(reply_ids) and reply_ids[i] != end_id:
        if reply_ids[i] >= base_vocab:
            return 0.0
        i += 1
    try:
        text = decode(reply_ids[:i])
    except Exception:
        return 0.0
    return float(text.strip() == answer)
'''),
                    "group_advantages": Replace('''
def group_advantages(rewards, scale_by_std=True, eps=1e-4):
    std, mean = torch.std_mean(rewards, dim=-1, keepdim=True)
    adv = rewards - mean
    return adv / (std + eps) if scale_by_std else adv
'''),
                    "grpo_loss": Replace('''
def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip_eps=0.2, beta=0.04, aggregation="sequence",
              max_len=None):
    if aggregation not in {"sequence", "token", "constant"}:
        raise ValueError(f"aggregation must be 'sequence', 'token' or 'constant', not {aggregation!r}")
    ratio = torch.exp(logp - old_logp)
    A = advantages.unsqueeze(-1)
    loss = torch.max(-ratio * A, -torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)
    if beta:
        d = ref_logp - logp
        loss = loss + beta * (torch.expm1(d) - d)
    loss = loss.where(mask, loss.new_zeros(()))
    m = mask.to(loss.dtype)
    if aggregation == "sequence":
        return (loss.sum(-1) / m.sum(-1)).mean()
    if aggregation == "token":
        return loss.sum() / m.sum()
    return loss.sum() / (loss.size(0) * (max_len if max_len is not None else loss.size(1)))
'''),
                }),
]
