"""Benchmarks of the course (issue: reference speed against PyTorch, grading time).

Every ratio is measured side by side in one run (reference and PyTorch interleaved, median of
repeats), because these machines are noisy. Run: `course bench` (or `python benchmarks/bench.py`).
Options: --quick (smaller shapes), --no-grading (skip the notebook timings), --no-gpt (skip the
notebook 06 rows), --device cuda, --threads N; --gpt (only the notebook 06 rows: generation with
and without the key/value cache, and the GPT against Hugging Face's GPT2LMHeadModel); --scale
(only the class throughput of the whole course: 1 and 2 local workers and a Dask cluster of 2
workers, and a projection to --project students).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

from course import bank, grading
from course.profile import measure_floor
from course.paths import assignments, repo_root
from course.reference import load


def saved_bytes(fn) -> int:
    """Bytes of tensors autograd saves for backward while running fn (activation memory)."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def timeit(fn, device, repeats):
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return times


def side_by_side(ref_fn, torch_fn, device, repeats):
    ref_fn(), torch_fn()                      # warm-up
    ref_t, torch_t = [], []
    for _ in range(repeats):                  # interleave so drift hits both equally
        ref_t += timeit(ref_fn, device, 1)
        torch_t += timeit(torch_fn, device, 1)
    return statistics.median(ref_t), statistics.median(torch_t)


def copy_mha(src, dst):
    with torch.no_grad():
        dst.in_proj_weight.copy_(torch.cat([src.query_matrix.weight, src.key_matrix.weight, src.value_matrix.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.query_matrix.bias, src.key_matrix.bias, src.value_matrix.bias]))
        dst.out_proj.weight.copy_(src.out.weight)
        dst.out_proj.bias.copy_(src.out.bias)


def module_rows(ns, device, lengths, batch, embed_dim, heads, repeats):
    rows = []
    for T in lengths:
        x = torch.randn(batch, T, embed_dim, device=device, requires_grad=True)
        pt = nn.MultiheadAttention(embed_dim, heads, batch_first=True).to(device)
        # Notebook 02's readable layer keeps the T x T weights: compared with PyTorch asked for them.
        # The given layer of notebooks 03-05 uses the fused kernel: compared with PyTorch's default.
        for label, cls, need_weights in [("MHA readable (02) fwd+bwd", "ReadableMultiHeadAttention", True),
                                         ("MHA given (03-05) fwd+bwd", "MultiHeadAttention", False)]:
            ref = ns[cls](embed_dim, heads).to(device)
            copy_mha(ref, pt)
            f_ref = lambda: ref(x, x, x).sum().backward()
            f_pt = lambda: pt(x, x, x, need_weights=need_weights,
                              average_attn_weights=False)[0].sum().backward()
            r, p = side_by_side(f_ref, f_pt, device, repeats)
            m_ref = saved_bytes(lambda: ref(x, x, x))
            m_pt = saved_bytes(lambda: pt(x, x, x, need_weights=need_weights, average_attn_weights=False))
            base = f"nn.MultiheadAttention{'(weights)' if need_weights else ''}"
            rows.append((label, base, T, r, p, m_ref, m_pt))

        blk = ns["TransformerBlock"](embed_dim, 4, heads, 0.0).to(device)
        layer = nn.TransformerEncoderLayer(embed_dim, heads, 4 * embed_dim, 0.0, batch_first=True).to(device)
        f_ref = lambda: blk(x, x, x).sum().backward()
        f_pt = lambda: layer(x).sum().backward()
        r, p = side_by_side(f_ref, f_pt, device, repeats)
        rows.append(("TransformerBlock fwd+bwd", "nn.TransformerEncoderLayer", T, r, p,
                     saved_bytes(lambda: blk(x, x, x)), saved_bytes(lambda: layer(x))))

        vocab = 1000
        src = torch.randint(0, vocab, (batch, T), device=device)
        tgt = torch.randint(0, vocab, (batch, T + 1), device=device)
        model = ns["Transformer"](embed_dim, vocab, vocab, T + 1, 2, 4, heads, 0.0).to(device)
        emb_s, emb_t = nn.Embedding(vocab, embed_dim).to(device), nn.Embedding(vocab, embed_dim).to(device)
        core = nn.Transformer(embed_dim, heads, 2, 2, 4 * embed_dim, 0.0, batch_first=True).to(device)
        head = nn.Linear(embed_dim, vocab).to(device)
        pt_params = [*emb_s.parameters(), *emb_t.parameters(), *core.parameters(), *head.parameters()]
        opt_ref = torch.optim.Adam(model.parameters(), lr=1e-4)
        opt_pt = torch.optim.Adam(pt_params, lr=1e-4)
        loss_fn = nn.CrossEntropyLoss()
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=device)

        def step_ref():
            opt_ref.zero_grad()
            logits = model(src, tgt[:, :-1])
            loss_fn(logits.reshape(-1, vocab), tgt[:, 1:].reshape(-1)).backward()
            opt_ref.step()

        def step_pt():
            opt_pt.zero_grad()
            h = core(emb_s(src), emb_t(tgt[:, :-1]), tgt_mask=mask)
            loss_fn(head(h).reshape(-1, vocab), tgt[:, 1:].reshape(-1)).backward()
            opt_pt.step()

        r, p = side_by_side(step_ref, step_pt, device, max(2, repeats // 2))
        rows.append(("encoder-decoder train step", "nn.Transformer (same size)", T, r, p,
                     saved_bytes(lambda: model(src, tgt[:, :-1])),
                     saved_bytes(lambda: head(core(emb_s(src), emb_t(tgt[:, :-1]), tgt_mask=mask)))))
    return rows


def generation_rows(ns, device, lengths, prompt=16, vocab=1000, embed_dim=128, layers=4, heads=4,
                    repeats=3, long_repeats=1):
    """Greedy generation by notebook 06's `generate` with the key/value cache and without it.

    Without the cache every new token re-runs the model over the whole sequence so far (total
    work quadratic in the length, attention cubic); with it only the new token goes through the
    model, attending to the kept keys and values. Both paths must give the same tokens: that
    checks the cache. A GPT with random weights (only the shapes matter for the time), batch 1.
    One warm-up for the whole table, then per length the two paths interleaved, median of
    ``repeats`` runs; lengths of 1024 and more take ``long_repeats`` (the uncached 1024-token run
    is by far the slowest line of the section).
    Returns [(new tokens, runs, cached seconds, uncached seconds, first differing position or None)]."""
    generate = ns["generate"]
    model = ns["GPT"](vocab, embed_dim, prompt + max(lengths), num_layers=layers, n_heads=heads, dropout=0.0).to(device).eval()
    ids = torch.randint(0, vocab, (1, prompt), device=device)
    for cache in (True, False):                                    # warm-up
        generate(model, ids, 8, temperature=0, use_cache=cache)
    rows = []
    for n in lengths:
        runs = long_repeats if n >= 1024 else repeats
        out, times = {}, {True: [], False: []}
        for _ in range(runs):                                      # interleaved: drift hits both
            for cache in (True, False):
                def run(cache=cache):
                    out[cache] = generate(model, ids, n, temperature=0, use_cache=cache)
                times[cache] += timeit(run, device, 1)
        differ = (out[True] != out[False]).any(dim=0).nonzero()
        rows.append((n, runs, statistics.median(times[True]), statistics.median(times[False]),
                     None if len(differ) == 0 else int(differ[0]) - prompt))
    return rows


def gpt2_rows(ns, device, batch=8, T=128, vocab=1000, embed_dim=256, layers=4, heads=4, repeats=5):
    """Notebook 06's GPT against Hugging Face's GPT2LMHeadModel of the same size and weights.

    A scaled-down GPT-2 (no download: random weights from the config) is copied into the
    reference GPT with `load_gpt2_weights`, so the logits must agree (checks the port; the
    largest difference is returned) and the timing compares like with like: forward + backward of
    the next-token cross-entropy, both in train mode with dropout 0. Hugging Face's default
    attention is PyTorch's fused scaled_dot_product_attention ("sdpa"); its "eager" path, like
    the notebook's, computes the T x T weights explicitly: a row against each.
    Returns (max |logits difference|, [(label, baseline, T, ours s, theirs s, ours act bytes,
    theirs act bytes)])."""
    import copy
    import torch.nn.functional as F
    import transformers
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=T, n_embd=embed_dim, n_layer=layers,
                                     n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0)
    hf = transformers.GPT2LMHeadModel(config)
    model = ns["load_gpt2_weights"](ns["GPT"](vocab, embed_dim, T, num_layers=layers, n_heads=heads, dropout=0.0), hf)
    model, hf = model.to(device).train(), hf.to(device).train()
    hf_eager = copy.deepcopy(hf)
    hf_eager.set_attn_implementation("eager")
    ids = torch.randint(0, vocab, (batch, T), device=device)
    ours = lambda: model(ids)[0]
    theirs = {m: (lambda m=m: m(input_ids=ids, use_cache=False).logits) for m in (hf, hf_eager)}
    with torch.no_grad():
        diff = max((ours() - theirs[m]()).abs().max().item() for m in (hf, hf_eager))
    assert diff < 1e-4, f"the GPT's logits differ from GPT2LMHeadModel's by {diff:.2e} (> 1e-4)"

    def step(net, logits_fn):
        def fn():
            net.zero_grad(set_to_none=True)
            logits = logits_fn()
            F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1)).backward()
        return fn

    rows = []
    for label, net in [("GPT2LMHeadModel (sdpa)", hf), ("GPT2LMHeadModel (eager)", hf_eager)]:
        r, p = side_by_side(step(model, ours), step(net, theirs[net]), device, repeats)
        rows.append(("GPT (06) fwd+bwd", label, T, r, p, saved_bytes(ours), saved_bytes(theirs[net])))
    return diff, rows


def section_time(name: str, wall: float, cpu: float, loadavg: float):
    """Wall and CPU seconds of a section, and the load average before it: on a shared machine the
    CPU seconds (all threads) tell the section's own cost when other work slows the wall clock."""
    print(f"{name} section: {time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU "
          f"(load average before: {loadavg:.1f})")


def print_gpt(ns, device, quick: bool, repeats: int):
    """The two notebook 06 tables, each with the seconds it took."""
    t, cpu, loadavg = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    lengths = [64, 256] if quick else [64, 256, 1024]
    rows = generation_rows(ns, device, lengths)
    print("\ngreedy generation, notebook 06 generate(); GPT vocab 1000, embed_dim 128, 4 layers, 4 heads, "
          "random weights; batch 1, prompt 16:")
    print(f"{'new tokens':>10}{'runs':>6}{'cached tok/s':>14}{'uncached tok/s':>16}{'speed-up':>10}  same tokens")
    for n, runs, cached, uncached, differ in rows:
        same = "yes" if differ is None else f"NO (from new token {differ})"
        print(f"{n:>10}{runs:>6}{n / cached:>14.1f}{n / uncached:>16.1f}{uncached / cached:>10.2f}  {same}")
    section_time("generation", t, cpu, loadavg)

    t, cpu, loadavg = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    diff, rows = gpt2_rows(ns, device, repeats=repeats)
    print("\nGPT (06) vs Hugging Face GPT2LMHeadModel, same size and weights (vocab 1000, embed_dim 256, "
          "4 layers, 4 heads), batch 8, train mode, dropout 0;")
    print(f"max |logits difference| after load_gpt2_weights: {diff:.2e} (must be < 1e-4)")
    print(f"{'comparison':<28}{'Hugging Face baseline':<28}{'T':>6}{'ref ms':>10}{'HF ms':>10}{'ratio':>8}"
          f"{'ref act MB':>12}{'HF act MB':>14}")
    for label, base, T, r, p, mr, mp in rows:
        print(f"{label:<28}{base:<28}{T:>6}{r * 1e3:>10.1f}{p * 1e3:>10.1f}{r / p:>8.2f}"
              f"{mr / 2**20:>12.1f}{mp / 2**20:>14.1f}")
    section_time("GPT-2", t, cpu, loadavg)


def execution_rows():
    """Seconds to run each notebook top to bottom (reference answers, plain kernel, no nbgrader)."""
    from nbclient import NotebookClient
    root = repo_root()
    rows = []
    for a in assignments(root):
        nb = bank.reference_submission(a, root)
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
            rows.append((a, time.perf_counter() - t))
    return rows


def grading_rows():
    """Seconds to autograde the reference student: each notebook alone, and the whole course.

    One course folder, as an instructor has: every assignment generated once (timed as setup),
    then one `nbgrader autograde` per notebook, and one `nbgrader autograde "*"` for a second
    student with the same notebooks (nbgrader starts once for the whole course).
    Returns (setup seconds, [(assignment, seconds, full marks)], whole-student run)."""
    root = repo_root()
    ids = assignments(root)
    notebooks = {a: bank.reference_submission(a, root) for a in ids}
    with tempfile.TemporaryDirectory() as tmp:
        whole = grading.grade_student(notebooks, Path(tmp), root, student="whole")
        ws = grading.Workspace.existing(Path(tmp))
        rows = []
        for a in ids:
            ws.submit("single", a, notebooks[a])
            _, seconds = grading.timed(ws.autograde, a, "single")
            res = ws.results(a, ["single"])["single"]
            rows.append((a, seconds, res.error is None and all(c.full for c in res.auto_cells.values())))
    return whole.setup_seconds, rows, whole


def class_rows(class_size: int, workers: int):
    """A class of `class_size` reference students, whole course, graded as a class is: the
    students split round-robin into `workers` course folders (every assignment generated once
    per folder: setup, not timed), then one `nbgrader autograde "*"` per folder, all folders at
    once. Returns (seconds, every cell full marks)."""
    from concurrent.futures import ThreadPoolExecutor
    root = repo_root()
    ids = assignments(root)
    notebooks = {a: bank.reference_submission(a, root) for a in ids}
    students = [f"s{i:03d}" for i in range(class_size)]
    groups = [students[i::workers] for i in range(workers)]
    with tempfile.TemporaryDirectory(prefix="course-class-") as tmp:
        spaces = []
        for i, group in enumerate(groups):
            ws = grading.Workspace(Path(tmp) / f"worker{i}", root, ids)
            for a in ids:
                ws.generate(a)
                for s in group:
                    ws.submit(s, a, notebooks[a])
            spaces.append((ws, group))
        t = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda wg: wg[0].autograde("*"), spaces))
        seconds = time.perf_counter() - t
        full = all(r.error is None and r.auto_cells and all(c.full for c in r.auto_cells.values())
                   for ws, group in spaces for a in ids for r in ws.results(a, group).values())
    return seconds, full


def print_class_rows(floor: float, whole_seconds: float, class_size: int, project: int):
    """The issue's class targets, side by side with the floor of the same run: the marginal cost
    of one more student (one worker: a class of `class_size` in one nbgrader run against one
    student alone) and the throughput of 2 workers on the whole course."""
    n = len(assignments(repo_root()))
    seconds1, full1 = class_rows(class_size, 1)
    marginal = (seconds1 - whole_seconds) / (class_size - 1)
    print(f"class of {class_size}, whole course, 1 worker (one nbgrader run): {seconds1:.1f} s; marginal cost per "
          f"extra student {marginal:.1f} s = {marginal / (n * floor):.2f}x the floor of {n} "
          f"(target: at most 1.5x){'' if full1 else '  NOT FULL MARKS'}")
    size2 = 2 * class_size
    seconds2, full2 = class_rows(size2, 2)
    per_minute = 60 * size2 / seconds2
    print(f"class of {size2}, whole course, 2 workers on {os.cpu_count()} cores: {seconds2:.1f} s = "
          f"{per_minute:.2f} students/minute (target: at least 3; the floor alone allows "
          f"{60 * 2 / (n * floor):.2f}){'' if full2 else '  NOT FULL MARKS'}")
    print(f"projection for {project} students at this rate: {project / per_minute / 60:.1f} h on 2 workers, "
          f"{project / per_minute / 60 / 8:.1f} h on 16 (workers scale linearly on separate cores)")


def scale_rows(class_size: int, dask_workers: int = 2):
    """Whole-course class throughput, every score into the course's one gradebook.

    One course folder with every assignment generated (setup, not timed) and ``class_size``
    students who each submitted every reference notebook; each run grades a fresh copy of
    it, one task per (student, notebook), as `course grade` does: 1 local worker on SQLite
    (the sequential default), 2 local workers on PostgreSQL (`--workers 2`), and a Dask
    LocalCluster of 2 worker processes on PostgreSQL (`--dask --workers 2`).
    Returns [(label, workers, seconds, all full marks, load average before the run)]."""
    import shutil
    from course import db, distributed
    root = repo_root()
    ids = assignments(root)
    rows = []
    with tempfile.TemporaryDirectory(prefix="course-scale-") as tmp:
        base = Path(tmp) / "base"
        ws = grading.Workspace(base, root, ids)
        for a in ids:
            ws.generate(a)
        students = [f"s{i:03d}" for i in range(class_size)]
        for a in ids:
            nb = bank.reference_submission(a, root)
            for s in students:
                ws.submit(s, a, nb)
        pairs = [(a, s) for s in students for a in ids]

        def full_marks(course: Path) -> bool:
            w = grading.Workspace.existing(course)
            ok = True
            for a in ids:
                for r in w.results(a, students).values():
                    lost = [g for g, c in r.auto_cells.items() if not c.full]
                    if r.error or not r.auto_cells or lost:
                        ok = False
                        print(f"  {course.name}: {r.student} {a}: {r.error or 'lost ' + ', '.join(lost)}")
            return ok

        for label, workers, engine in [("1 local worker, SQLite", 1, "local"),
                                       ("2 local workers, PostgreSQL", 2, "local"),
                                       (f"Dask LocalCluster, {dask_workers} workers, PostgreSQL", dask_workers, "dask")]:
            course = Path(tmp) / f"run-{len(rows)}"
            shutil.copytree(base, course, symlinks=True)
            url = db.course_url(course)
            loadavg = os.getloadavg()[0]
            try:
                if workers > 1 or engine == "dask":
                    url = db.start(course)
                    db.use(course, url)
                if engine == "dask":
                    with distributed.DaskGrader(None, workers=workers) as grader:
                        grader.wait_for_workers(workers)
                        t = time.perf_counter()
                        grader.run(course, pairs, url)
                        seconds = time.perf_counter() - t
                else:
                    t = time.perf_counter()
                    distributed.run_local(course, pairs, url, workers=workers)
                    seconds = time.perf_counter() - t
                rows.append((label, workers, seconds, full_marks(course), loadavg))
            finally:
                db.drop(course)
    return rows


def print_scale(rows, class_size: int, project: int):
    print(f"\nwhole course ({len(assignments(repo_root()))} notebooks per student, one task per notebook), "
          f"class of {class_size}:")
    print(f"{'engine':<44}{'seconds':>9}{'students/min':>14}{'worker-s/student':>18}{'load avg':>10}")
    for label, workers, seconds, ok, loadavg in rows:
        print(f"{label:<44}{seconds:>9.1f}{60 * class_size / seconds:>14.2f}"
              f"{seconds * workers / class_size:>18.1f}{loadavg:>10.1f}{'' if ok else '  NOT FULL MARKS'}")
    # projection: measured per-student cost (worker-seconds) x class size / workers
    parallel = [seconds * workers / class_size for _, workers, seconds, _, _ in rows if workers > 1]
    cost = min(parallel) if parallel else rows[0][2] / class_size
    print(f"\nprojection for {project} students at {cost:.1f} worker-seconds per student "
          "(the best measured parallel engine; one worker = one core and ~2 GB):")
    for workers in (2, 16, 64, 256):
        hours = cost * project / workers / 3600
        print(f"  {workers:>4} workers: {hours:6.2f} h ({60 * workers / cost:.1f} students/minute)")


def load_rows(runs: int, with_bank: bool, only: list[str] | None = None):
    """The same grades under load: a quiet run (workers = cores, no hogs), then `runs` runs with
    twice as many workers as cores plus a CPU hog per core; per-cell differences counted."""
    from course import load
    root = repo_root()
    ids = only or assignments(root)
    subs = {}
    for a in ids:
        subs[a] = {"reference": bank.reference_submission(a, root)}
        if with_bank:
            for entry in bank.load(a, root):
                subs[a][f"bank-{entry.name}"] = bank.apply(entry, a, root)
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="course-load-") as tmp:
        quiet = load.grade_under_load(subs, Path(tmp) / "quiet", workers=cores, hogs=0)
        rows.append(("quiet", quiet, []))
        for i in range(runs):
            loaded = load.grade_under_load(subs, Path(tmp) / f"loaded{i}")
            rows.append((f"oversubscribed {i + 1}", loaded, load.compare(quiet["scores"], loaded["scores"])))
    n_cells = sum(len(v) for v in quiet["scores"].values())
    print(f"\nthe same grades under load: {sum(len(v) for v in subs.values())} submissions of "
          f"{len(ids)} notebooks ({'reference and bank' if with_bank else 'reference'}), {n_cells} grade cells")
    print(f"{'run':<22}{'workers':>8}{'hogs':>6}{'seconds':>9}{'slowdown':>10}{'cell limit s':>14}{'cells differing':>17}")
    for label, run, diffs in rows:
        slow = max((s["slowdown"] for s in run["speed"]), default=float("nan"))
        limit = max((s["cell_timeout"] for s in run["speed"]), default=0)
        print(f"{label:<22}{run['workers']:>8}{run['hogs']:>6}{run['seconds']:>9.0f}{slow:>10.2f}{limit:>14}"
              f"{len(diffs):>17}")
        for d in diffs[:20]:
            print(f"    {d}")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-grading", action="store_true")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--class-size", type=int, default=3,
                   help="students of the 1-worker class row (the 2-worker row grades twice as many)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads for the module and GPT tables (default: torch's own choice)")
    p.add_argument("--gpt", action="store_true",
                   help="only the notebook 06 rows: generation with and without the key/value cache, "
                        "and the GPT against Hugging Face's GPT2LMHeadModel of the same size")
    p.add_argument("--no-gpt", action="store_true", help="skip the notebook 06 rows")
    p.add_argument("--scale", action="store_true",
                   help="only the whole-course class throughput (1 and 2 local workers, Dask with 2) "
                        "and the projection to --project students")
    p.add_argument("--scale-class", type=int, default=4, help="students in the --scale class")
    p.add_argument("--project", type=int, default=5000, help="class size of the projection")
    p.add_argument("--load", action="store_true",
                   help="only the same-grades-under-load rows: a quiet run, then --load-runs runs with "
                        "twice as many grading workers as cores plus a CPU hog per core")
    p.add_argument("--load-runs", type=int, default=3)
    p.add_argument("--load-bank", action="store_true", help="--load grades every bank entry too")
    p.add_argument("--load-only", nargs="*", default=None, metavar="ID", help="--load: only these notebooks")
    args = p.parse_args(argv)
    if not args.no_grading or args.scale or args.load:
        from course.isolation import mode
        print(f"kernel isolation: {mode()}", flush=True)
    if args.load:
        rows = load_rows(args.load_runs, args.load_bank, args.load_only)
        return 0 if not any(diffs for _, _, diffs in rows) else 1
    if args.scale:
        print_scale(scale_rows(args.scale_class), args.scale_class, args.project)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    ns = load(upto="06_gpt")       # the components it times; 07's saved cells prepare that notebook's data
    lengths = [64, 256] if args.quick else [64, 256, 1024]
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    if args.gpt:
        print(f"device: {name}; torch {torch.__version__}")
        print_gpt(ns, device, args.quick, 5 if args.quick else 7)
        return 0
    print(f"device: {name}; torch {torch.__version__}; batch 4, embed_dim 256, 8 heads")
    print(f"{'comparison':<28}{'PyTorch baseline':<28}{'T':>6}{'ref ms':>10}{'torch ms':>10}{'ratio':>8}"
          f"{'ref act MB':>12}{'torch act MB':>14}")
    for label, base, T, r, pt, mr, mp in module_rows(ns, device, lengths, 4, 256, 8, 5 if args.quick else 7):
        flag = "" if r / pt <= 1.3 else "  > 1.3x target"
        print(f"{label:<28}{base:<28}{T:>6}{r * 1e3:>10.1f}{pt * 1e3:>10.1f}{r / pt:>8.2f}"
              f"{mr / 2**20:>12.1f}{mp / 2**20:>14.1f}{flag}")
    if not args.no_gpt:
        print_gpt(ns, device, args.quick, 5 if args.quick else 7)
    if args.no_grading:
        return 0
    floor, shutdown = measure_floor()
    print(f"\nfloor (kernel start + imports of torch, numpy, matplotlib, seaborn, transformers, as stock "
          f"nbclient runs it; median of 3): {floor:.1f} s, of which {shutdown:.1f} s is the kernel's graceful "
          "shutdown (graded kernels are killed instead)")
    for a, seconds in execution_rows():
        print(f"execute   {a:<28}{seconds:>7.1f} s  ({seconds / floor:.1f}x floor)")
    # The machine's speed drifts over a run of many minutes: each ratio below is taken against the
    # floor measured right before its row, not the one of the start.
    floor, _ = measure_floor()
    print(f"floor again, right before the grading rows (their ratios use it): {floor:.1f} s")
    setup, rows, whole = grading_rows()
    print(f"course setup, once: generate_assignment of all {len(rows)} notebooks: {setup:.1f} s")
    for a, seconds, ok in rows:
        print(f"autograde {a:<28}{seconds:>7.1f} s  ({seconds / floor:.1f}x floor){'' if ok else '  NOT FULL MARKS'}")
    print(f"autograde, one notebook at a time, sum: {sum(r[1] for r in rows):.1f} s")
    full = all(r.error is None and all(c.full for c in r.auto_cells.values()) for r in whole.results.values())
    print(f"autograde one whole student ({len(rows)} notebooks, one nbgrader run): {whole.seconds:.1f} s = "
          f"{whole.seconds / (len(rows) * floor):.2f}x the floor of {len(rows)} kernel starts with imports "
          f"(target: at most 2x){'' if full else '  NOT FULL MARKS'}")
    floor, _ = measure_floor()
    print(f"floor again, right before the class rows (their ratios use it): {floor:.1f} s")
    print_class_rows(floor, whole.seconds, args.class_size, args.project)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
