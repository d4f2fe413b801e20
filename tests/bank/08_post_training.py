"""Gate 4 bank of 08_post_training: common wrong submissions (each must lose exactly its cells) and correct
alternatives in other styles (each must keep full marks).

The experiments call every exercise, but only the test cells grade. apply_lora's hidden checks run the student's
LoRALinear inside the student's apply_lora against PEFT, so a LoRALinear whose outputs differ from PEFT's loses
test_apply_lora_hidden too; the bonus wraps four Linears in the student's LoRALinear itself (not through apply_lora)
with rank 1 and alpha 4, where alpha / rank and alpha agree, and merges with its merged(). dpo_loss's checks use their own
log-probabilities, so a wrong sequence_logprob costs only its own cells. The checks are judged outside the kernel on
inputs drawn afresh at each grading (course/judge.py): each verdict below holds for every seed. Every rule a hidden
check applies is also taught by a visible check (issue 36), so each wrong entry loses its exercise's visible cell too.
"""
from course.bank import Advised, Alternative, Replace, Sub, Wrong

CHAT = ["test_render_chat_visible", "test_render_chat_hidden"]
LOSS = ["test_masked_loss_visible", "test_masked_loss_hidden"]
LORA = ["test_lora_visible", "test_lora_hidden"]
APPLY = ["test_apply_lora_visible", "test_apply_lora_hidden"]
LOGP = ["test_sequence_logprob_visible", "test_sequence_logprob_hidden"]
DPO = ["test_dpo_loss_visible", "test_dpo_loss_hidden"]
BONUS = ["bonus_merge_lora"]

WRONG = [
    # ---- render_chat
    Wrong("chat_trains_role_token", "the mask is True on the assistant's role token too",
          edits={"render_chat": Sub("mask += [False] + [trained] * (len(content) + 1)",
                                    "mask += [trained] * (len(content) + 2)")},
          loses=CHAT),
    Wrong("chat_end_not_trained", "the reply's end token is not trained (the model never learns to stop)",
          edits={"render_chat": Sub("mask += [False] + [trained] * (len(content) + 1)",
                                    "mask += [False] + [trained] * len(content) + [False]")},
          loses=CHAT),
    Wrong("chat_trains_every_message", "every message's content is trained, the user's too",
          edits={"render_chat": Sub('trained = message["role"] == "assistant"', "trained = True")},
          loses=CHAT),
    Wrong("chat_no_generation_prompt", "add_generation_prompt is ignored",
          edits={"render_chat": Sub("    if add_generation_prompt:\n", "    if False:\n")},
          loses=CHAT),
    Wrong("chat_unknown_role_keyerror", "no role check: an unknown role fails with the dictionary's KeyError",
          edits={"render_chat": Sub('if message["role"] not in ("system", "user", "assistant"):', "if False:")},
          loses=CHAT),
    Wrong("chat_mask_of_ints", "the mask holds 0 and 1 instead of bools",
          edits={"render_chat": Sub("mask += [False] + [trained] * (len(content) + 1)",
                                    "mask += [0] + [int(trained)] * (len(content) + 1)")},
          loses=CHAT),
    # ---- chat_labels and masked_lm_loss
    Wrong("loss_without_shift", "scores logits[t] against labels[t] (no shift by one)",
          edits={"masked_loss": [Sub("targets = labels[:, 1:]", "targets = labels"),
                                 Sub("logits[:, :-1].reshape(-1, logits.size(-1))", "logits.reshape(-1, logits.size(-1))")]},
          loses=LOSS),
    Wrong("loss_mean_of_row_means", "averages each row's mean (a short reply weighs as much as a long one)",
          edits={"masked_loss": Sub("    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), "
                                    "targets.reshape(-1),\n                           ignore_index=IGNORE_INDEX)",
                                    "    rows = [F.cross_entropy(logits[b, :-1].float(), targets[b], ignore_index=IGNORE_INDEX)\n"
                                    "            for b in range(len(targets)) if (targets[b] != IGNORE_INDEX).any()]\n"
                                    "    return torch.stack(rows).mean()")},
          loses=LOSS),
    Wrong("labels_first_position_ignored", "chat_labels sets position 0 to IGNORE_INDEX too (no loss reads it, but TRL's "
          "labels are the ids wherever the mask is True)",
          edits={"masked_loss": Sub("return ids.masked_fill(~mask, IGNORE_INDEX)",
                                    "labels = ids.masked_fill(~mask, IGNORE_INDEX)\n    labels[:, 0] = IGNORE_INDEX\n"
                                    "    return labels")},
          loses=LOSS),
    Wrong("labels_shifted_early", "chat_labels already shifts the labels by one (and the loss shifts again)",
          edits={"masked_loss": Sub("return ids.masked_fill(~mask, IGNORE_INDEX)",
                                    "return torch.cat([ids.masked_fill(~mask, IGNORE_INDEX)[:, 1:], "
                                    "torch.full_like(ids[:, :1], IGNORE_INDEX)], dim=1)")},
          loses=LOSS),
    Wrong("labels_fill_in_place", "fills the ids tensor itself with -100",
          edits={"masked_loss": Sub("return ids.masked_fill(~mask, IGNORE_INDEX)", "return ids.masked_fill_(~mask, IGNORE_INDEX)")},
          loses=LOSS),
    Wrong("loss_nan_when_nothing_counts", "no check: a batch with nothing to train on returns nan silently",
          edits={"masked_loss": Sub("    if not (targets != IGNORE_INDEX).any():\n        raise ValueError(", "    if False:\n        raise ValueError(")},
          loses=LOSS),
    Wrong("loss_checks_unshifted_labels", "the nothing-to-train check looks at every label, position 0's too",
          edits={"masked_loss": Sub("if not (targets != IGNORE_INDEX).any():", "if not (labels != IGNORE_INDEX).any():")},
          loses=LOSS),
    Wrong("loss_in_half_precision", "computes the loss in the logits' dtype (float16 stays float16)",
          edits={"masked_loss": Sub("logits[:, :-1].reshape(-1, logits.size(-1)).float()", "logits[:, :-1].reshape(-1, logits.size(-1))")},
          loses=LOSS),
    Wrong("loss_cast_after", "computes the loss in the logits' dtype and casts it to float32 after (float16 and bfloat16 "
          "losses are off by 1e-3 to 1e-2)",
          edits={"masked_loss": Sub("logits[:, :-1].reshape(-1, logits.size(-1)).float(), targets.reshape(-1),\n"
                                    "                           ignore_index=IGNORE_INDEX)",
                                    "logits[:, :-1].reshape(-1, logits.size(-1)), targets.reshape(-1),\n"
                                    "                           ignore_index=IGNORE_INDEX).float()")},
          loses=LOSS),
    Wrong("loss_upcasts_float16_only", "upcasts float16 logits only: bfloat16 logits are computed in bfloat16 (the "
          "result cast to float32)",
          edits={"masked_loss": Sub("    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), "
                                    "targets.reshape(-1),\n                           ignore_index=IGNORE_INDEX)",
                                    "    if logits.dtype == torch.float16:\n        logits = logits.float()\n"
                                    "    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), "
                                    "targets.reshape(-1),\n                           ignore_index=IGNORE_INDEX).float()")},
          loses=LOSS),
    # ---- LoRALinear
    Wrong("lora_B_random", "lora_B starts random, so the wrapped layer does not start as the base layer",
          edits={"LoRALinear": Sub("self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=w.device, dtype=w.dtype))",
                                   "self.lora_B = nn.Parameter(torch.randn(base.out_features, rank, device=w.device, dtype=w.dtype) * 0.1)")},
          loses=LORA),
    Wrong("lora_scaling_is_alpha", "scaling = alpha instead of alpha / rank",
          edits={"LoRALinear": Sub("self.scaling = base, rank, alpha / rank", "self.scaling = base, rank, alpha")},
          loses=LORA + ["test_apply_lora_hidden"]),
    Wrong("lora_base_trainable", "the base layer is not frozen",
          edits={"LoRALinear": Sub("        base.requires_grad_(False)\n", "")},
          loses=LORA),
    Wrong("lora_merge_without_scaling", "merged() adds B @ A without the scaling",
          edits={"LoRALinear": Sub("w + self.scaling * self.lora_B @ self.lora_A", "w + self.lora_B @ self.lora_A")},
          loses=LORA + BONUS),
    Wrong("lora_merge_in_place", "merged() adds the update to the base weight in place and returns the base layer",
          edits={"LoRALinear": Sub("layer.weight.copy_(w + self.scaling * self.lora_B @ self.lora_A)",
                                   "w += self.scaling * self.lora_B @ self.lora_A\n            return self.base")},
          loses=LORA),
    Wrong("lora_A_zero", "lora_A starts at zero too: every gradient of A and B is zero, nothing ever trains",
          edits={"LoRALinear": Sub("nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))", "nn.init.zeros_(self.lora_A)")},
          loses=LORA),
    Advised("lora_forward_full_update", "forward builds the full (out, in) update scaling * B @ A and multiplies x by it (right values; only the kernel's dispatch-mode count shows the full update, so it is advice at grading)",
          edits={"LoRALinear": Sub("return self.base(x) + (x @ self.lora_A.T) @ self.lora_B.T * self.scaling",
                                   "return self.base(x) + x @ (self.scaling * self.lora_B @ self.lora_A).T")},
          cells=LORA),
    Advised("lora_forward_merged_weight", "forward merges on the fly: F.linear with base.weight + scaling * B @ A (right values; only the kernel's dispatch-mode count shows the full update, so it is advice at grading)",
          edits={"LoRALinear": Sub("return self.base(x) + (x @ self.lora_A.T) @ self.lora_B.T * self.scaling",
                                   "return F.linear(x, self.base.weight + self.scaling * self.lora_B @ self.lora_A, "
                                   "self.base.bias)")},
          cells=LORA),
    Wrong("lora_rank_not_kept", "the rank is used but not kept as the attribute rank",
          edits={"LoRALinear": Sub("self.base, self.rank, self.scaling = base, rank, alpha / rank",
                                   "self.base, self.scaling = base, alpha / rank")},
          loses=LORA),
    Wrong("lora_merged_frozen_copy", "merged() returns a deep copy of the frozen base layer with the update added: the "
          "right weights, but frozen",
          edits={"LoRALinear": Sub("""        layer = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None,
                          device=w.device, dtype=w.dtype)
        with torch.no_grad():
            layer.weight.copy_(w + self.scaling * self.lora_B @ self.lora_A)
            if self.base.bias is not None:
                layer.bias.copy_(self.base.bias)
        return layer""", """        layer = copy.deepcopy(self.base)
        with torch.no_grad():
            layer.weight += self.scaling * self.lora_B @ self.lora_A
        return layer""")},
          loses=LORA),
    Wrong("lora_float32_always", "lora_A and lora_B are float32 whatever the base layer's dtype",
          edits={"LoRALinear": [Sub("torch.empty(rank, base.in_features, device=w.device, dtype=w.dtype)",
                                    "torch.empty(rank, base.in_features, device=w.device)"),
                                Sub("torch.zeros(base.out_features, rank, device=w.device, dtype=w.dtype)",
                                    "torch.zeros(base.out_features, rank, device=w.device)")]},
          loses=LORA),
    # ---- apply_lora
    Wrong("apply_substring_match", "a target matches any name that contains it ('query' wraps query_matrix)",
          edits={"apply_lora": Sub('return any(name == t or name.endswith("." + t) for t in target_modules)',
                                   "return any(t in name for t in target_modules)")},
          loses=APPLY),
    Wrong("apply_last_part_only", "compares only the last part of the name (a target with a dot matches nothing)",
          edits={"apply_lora": Sub('return any(name == t or name.endswith("." + t) for t in target_modules)',
                                   'return name.rpartition(".")[2] in target_modules')},
          loses=APPLY),
    Wrong("apply_no_freeze", "the rest of the model stays trainable",
          edits={"apply_lora": Sub("    model.requires_grad_(False)\n", "")},
          loses=APPLY),
    Wrong("apply_freeze_after_wrapping", "freezes the model after wrapping, so lora_A and lora_B are frozen too",
          edits={"apply_lora": [Sub("    model.requires_grad_(False)\n", ""),
                                Sub("    return model", "    model.requires_grad_(False)\n    return model")]},
          loses=APPLY),
    Wrong("apply_silent_when_nothing_matches", "a target list that matches nothing trains nothing, silently",
          edits={"apply_lora": Sub("    if not found:\n", "    if False:\n")},
          loses=APPLY),
    Wrong("apply_string_as_name", "a string target_modules is used as one name (PEFT reads a string as a regular "
          "expression matched whole)",
          edits={"apply_lora": Sub("return re.fullmatch(target_modules, name) is not None",
                                   'return name == target_modules or name.endswith("." + target_modules)')},
          loses=APPLY),
    Wrong("apply_string_search", "a string target_modules is searched for anywhere in the name (re.search, not re.fullmatch)",
          edits={"apply_lora": Sub("return re.fullmatch(target_modules, name) is not None",
                                   "return re.search(target_modules, name) is not None")},
          loses=APPLY),
    Wrong("apply_string_match_prefix", "a string target_modules is matched at the start of the name only (re.match, not "
          "re.fullmatch)",
          edits={"apply_lora": Sub("return re.fullmatch(target_modules, name) is not None",
                                   "return re.match(target_modules, name) is not None")},
          loses=APPLY),
    # ---- sequence_logprob
    Wrong("logprob_without_shift", "reads logits[t] at ids[t] (no shift by one)",
          edits={"sequence_logprob": [Sub("logits = model(ids)[0][:, :-1].float()", "logits = model(ids)[0][:, 1:].float()")]},
          loses=LOGP),
    Wrong("logprob_mean", "the mean log-probability of the reply's tokens instead of the sum",
          edits={"sequence_logprob": Sub("torch.where(mask[:, 1:], logp, torch.zeros_like(logp)).sum(-1)",
                                         "torch.where(mask[:, 1:], logp, torch.zeros_like(logp)).sum(-1) / mask[:, 1:].sum(-1).clamp(min=1)")},
          loses=LOGP),
    Wrong("logprob_multiplies_mask", "multiplies by the mask: a masked-out -inf becomes nan",
          edits={"sequence_logprob": Sub("torch.where(mask[:, 1:], logp, torch.zeros_like(logp)).sum(-1)", "(logp * mask[:, 1:]).sum(-1)")},
          loses=LOGP),
    Wrong("logprob_mask_misaligned", "uses mask[:, :-1] (the mask of the predicting position, not of the token)",
          edits={"sequence_logprob": Sub("torch.where(mask[:, 1:], logp", "torch.where(mask[:, :-1], logp")},
          loses=LOGP),
    # ---- dpo_loss
    Wrong("dpo_without_reference", "the margin ignores the reference model",
          edits={"dpo_loss": Sub("margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)",
                                 "margin = policy_chosen - policy_rejected")},
          loses=DPO),
    Wrong("dpo_sign_flipped", "rejected minus chosen: the loss pushes toward the rejected reply",
          edits={"dpo_loss": Sub("margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)",
                                 "margin = (policy_rejected - ref_rejected) - (policy_chosen - ref_chosen)")},
          loses=DPO),
    Wrong("dpo_sum_over_batch", "sums over the batch instead of the mean",
          edits={"dpo_loss": Sub("-F.logsigmoid(beta * margin).mean()", "-F.logsigmoid(beta * margin).sum()")},
          loses=DPO),
    Wrong("dpo_log_of_sigmoid", "torch.log(torch.sigmoid(...)): -inf for a margin of -10000",
          edits={"dpo_loss": Sub("-F.logsigmoid(beta * margin).mean()", "-torch.log(torch.sigmoid(beta * margin)).mean()")},
          loses=DPO),
    Wrong("dpo_detached_policy", "the margin is detached: the loss has the right value but no gradient reaches the policy",
          edits={"dpo_loss": Sub("-F.logsigmoid(beta * margin).mean()", "-F.logsigmoid(beta * margin.detach()).mean()")},
          loses=DPO),
    Wrong("dpo_default_beta_one", "the default beta is 1 instead of 0.1",
          edits={"dpo_loss": Sub("ref_rejected, beta=0.1):", "ref_rejected, beta=1.0):")},
          loses=DPO),
    Wrong("render_prompt_after_user", "adds the generation prompt whenever the conversation ends with a user turn",
          edits={"render_chat": Sub("if add_generation_prompt:",
                                    'if add_generation_prompt or (messages and messages[-1]["role"] == "user"):')},
          loses=CHAT),
    Wrong("logprob_in_logits_dtype", "the log-softmax in the logits' own dtype, cast to float32 after",
          edits={"sequence_logprob": [Sub("logits = model(ids)[0][:, :-1].float()", "logits = model(ids)[0][:, :-1]"),
                                      Sub("logp = F.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)",
                                          "logp = F.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1).float()")]},
          loses=LOGP),
    Wrong("logprob_upcasts_float16_only", "upcasts float16 logits only: a log-softmax of bfloat16 logits in bfloat16, "
          "cast to float32 after",
          edits={"sequence_logprob": [Sub("logits = model(ids)[0][:, :-1].float()",
                                          "logits = model(ids)[0][:, :-1]\n"
                                          "    if logits.dtype == torch.float16:\n        logits = logits.float()"),
                                      Sub("logp = F.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)",
                                          "logp = F.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1).float()")]},
          loses=LOGP),
    # ---- merge_lora (bonus)
    Wrong("merge_keeps_adapters", "returns the model with its LoRA layers in place",
          edits={"merge_lora": Sub("            (model.get_submodule(parent_name) if parent_name else model).add_module(child, module.merged())",
                                   "            pass")},
          loses=BONUS),
    # ---- the predictions
    Wrong("q1_mean_of_row_means", "predicts the mean of the rows' means (3.0)",
          edits={"answer_q1": Sub("answer_q1 = 2.0", "answer_q1 = 3.0")},
          loses=["test_answer_q1"]),
    Wrong("q2_dense_update", "counts the full weight matrices instead of the low-rank factors",
          edits={"answer_q2": Sub("answer_q2 = 18432", "answer_q2 = 2 * (4 * 64 * 64 + 2 * 64 * 256)")},
          loses=["test_answer_q2"]),
]

ALTERNATIVES = [
    Alternative("dpo_detached_reference", "the reference's log-probabilities detached, as TRL does (the reference is frozen)",
                edits={"dpo_loss": Sub("margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)",
                                       "margin = (policy_chosen - ref_chosen.detach()) - (policy_rejected - ref_rejected.detach())")}),
    Alternative("answers_as_expressions", "the predictions written as the computations that give them",
                edits={"answer_q1": Sub("answer_q1 = 2.0", "answer_q1 = (3 * 1.0 + 1 * 5.0) / 4"),
                       "answer_q2": Sub("answer_q2 = 18432", "answer_q2 = 2 * 8 * (4 * (64 + 64) + (64 + 256) + (256 + 64))")}),
    Alternative("functional_styles",
                "render_chat with extend; labels with torch.where; the loss from log_softmax and a mask; LoRA with F.linear "
                "and torch.addmm; apply_lora walking named_children recursively; log-probabilities from cross_entropy's "
                "per-token losses; DPO with softplus",
                edits={
                    "render_chat": Replace('''
def render_chat(messages, encode, chat_ids, add_generation_prompt=False):
    ids, mask = [], []
    for message in messages:
        role = message["role"]
        if role not in {"system", "user", "assistant"}:
            raise ValueError(f"role {role!r} is not one of system, user, assistant")
        body = [int(i) for i in encode(message["content"])]
        ids.extend([chat_ids["<|" + role + "|>"]] + body + [chat_ids["<|end|>"]])
        mask.extend([False] + [role == "assistant"] * (len(body) + 1))
    if add_generation_prompt:
        ids.extend([chat_ids["<|assistant|>"]])
        mask.extend([False])
    return ids, mask
'''),
                    "masked_loss": Replace('''
IGNORE_INDEX = -100


def chat_labels(ids, mask):
    return torch.where(mask, ids, torch.full_like(ids, IGNORE_INDEX))


def masked_lm_loss(logits, labels):
    target = labels[:, 1:]
    keep = target != IGNORE_INDEX
    if keep.sum() == 0:
        raise ValueError("every label is IGNORE_INDEX: nothing to train on")
    logp = torch.log_softmax(logits[:, :-1].to(torch.float32), dim=-1)
    picked = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()
'''),
                    "LoRALinear": Replace('''
class LoRALinear(nn.Module):
    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad = False
        self.rank = rank
        self.scaling = alpha / rank
        a = torch.empty(rank, base.in_features, dtype=base.weight.dtype, device=base.weight.device)
        bound = 1 / math.sqrt(base.in_features)
        self.lora_A = nn.Parameter(a.uniform_(-bound, bound))
        self.lora_B = nn.Parameter(base.weight.new_zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + self.scaling * F.linear(F.linear(x, self.lora_A), self.lora_B)

    def merged(self):
        out = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None).to(
            device=self.base.weight.device, dtype=self.base.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(torch.addmm(self.base.weight, self.lora_B, self.lora_A, alpha=self.scaling))
            if out.bias is not None:
                out.bias.copy_(self.base.bias)
        return out
'''),
                    "apply_lora": Replace('''
def apply_lora(model, target_modules, rank, alpha):
    for p in model.parameters():
        p.requires_grad = False
    count = 0
    if isinstance(target_modules, str):
        pattern = re.compile(target_modules)
        wanted = lambda full: bool(pattern.fullmatch(full))
    else:
        wanted = lambda full: any(full == t or full.endswith("." + t) for t in target_modules)

    def visit(module, prefix):
        nonlocal count
        for name, child in list(module.named_children()):
            full = prefix + name
            if isinstance(child, nn.Linear) and wanted(full):
                module.add_module(name, LoRALinear(child, rank, alpha))
                count += 1
            else:
                visit(child, full + ".")

    visit(model, "")
    if count == 0:
        raise ValueError(f"target_modules {target_modules} matched no nn.Linear")
    return model
'''),
                    "sequence_logprob": Replace('''
def sequence_logprob(model, ids, mask):
    logits = model(ids)[0].float()
    B, T, V = logits.shape
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1), reduction="none").view(B, T - 1)
    return -nll.masked_fill(~mask[:, 1:], 0.0).sum(dim=1)
'''),
                    "dpo_loss": Replace('''
def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.1):
    chosen = policy_chosen - ref_chosen
    rejected = policy_rejected - ref_rejected
    return F.softplus(-beta * (chosen - rejected)).mean()
'''),
                    "merge_lora": Replace('''
def merge_lora(model):
    def visit(module):
        for name, child in list(module.named_children()):
            if isinstance(child, LoRALinear):
                module.add_module(name, child.merged())
            else:
                visit(child)
    visit(model)
    return model
'''),
                }),
    Alternative("einsum_lora_and_loops",
                "LoRA with einsum and an explicit merge loop; render_chat building each message's lists apart; "
                "the loss with ignore_index on flattened views; log-probabilities by advanced indexing",
                edits={
                    "LoRALinear": [Sub("return self.base(x) + (x @ self.lora_A.T) @ self.lora_B.T * self.scaling",
                                       "down = torch.einsum('...i,ri->...r', x, self.lora_A)\n"
                                       "        return self.base(x) + self.scaling * torch.einsum('...r,or->...o', down, self.lora_B)")],
                    "sequence_logprob": Replace('''
def sequence_logprob(model, ids, mask):
    logp = torch.log_softmax(model(ids)[0].float(), dim=-1)[:, :-1]
    B, T = ids.shape
    rows = torch.arange(B).unsqueeze(1).expand(B, T - 1)
    cols = torch.arange(T - 1).unsqueeze(0).expand(B, T - 1)
    picked = logp[rows, cols, ids[:, 1:]]
    return torch.where(mask[:, 1:], picked, torch.zeros((), dtype=picked.dtype)).sum(dim=-1)
'''),
                }),
]
