#!/usr/bin/env python3
"""`BENCH=serve make bench`: the warm engine against cold processes, side by side.

Usage: bench_serve.py RAG PROJECT QUESTIONS.yaml OUT.json
  PROJECT holds an ingested corpus/ and a rag.toml. Prints Markdown table rows on stdout.

1. search: the median of 20 POST /v1/search to one `rag serve` against 20 `rag search`
   processes (after 2 warm-ups each).
2. batch: the questions answered by `rag ask --batch` (one process) against one `rag ask`
   process per question, the prompt cache emptied before each, with where the time goes.
3. concurrency: 8 clients asking at once through `rag serve` against the same 8 questions
   asked one after another by one client (prompt cache off, so neither pass reuses the
   other's prompts): generated tokens per second, latency and TTFT. SERVE_PARALLEL="1 4"
   runs it once per llm.parallel (1: one answer at a time; more: batched in one context).
4. load: for 2 minutes, 6 clients ask without pause against a queue of 2 (serve.queue):
   every request must end in 200 or 503 (with Retry-After), none in an error or a hang.
SERVE_PARTS=search,batch,concurrency,load chooses parts. Run it on a quiet machine:
everything here is wall time.
"""
import json, os, shutil, statistics, subprocess, sys, threading, time, urllib.request

rag, proj, qfile, out = sys.argv[1:5]
# The `question:` lines of the eval file (plain one-line strings there; no YAML library needed).
questions = [l.split("question:", 1)[1].strip().strip('"') for l in open(qfile) if l.strip().startswith("question:")]
env = dict(os.environ)
# SERVE_QUESTIONS=N keeps the first N questions; RAG_LLM_ROUTE picks the generator for all parts.
questions = questions[: int(os.environ.get("SERVE_QUESTIONS", len(questions)))]
model = env.get("RAG_LLM_ROUTE", "small")


def run(args, **kw):
    return subprocess.run([rag, "-q", *args], cwd=proj, check=True, stdout=subprocess.PIPE, env=env, **kw)


def start_server(extra=None):
    p = subprocess.Popen([rag, "serve", "--addr", "127.0.0.1:0"], cwd=proj, stderr=subprocess.PIPE, text=True, env={**env, **(extra or {})})
    for line in p.stderr:
        if "listening on http://" in line:
            addr = line.split("listening on http://")[1].split()[0]
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, addr
    raise SystemExit("rag serve did not start")


def post(addr, path, body):
    req = urllib.request.Request(f"http://{addr}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def median_ms(f, n=20):
    for _ in range(2):
        f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def clear_cache():
    shutil.rmtree(os.path.join(proj, ".rag", "prompt-cache"), ignore_errors=True)


def sums(answers):
    keys = ["retrieval_ms", "prefill_ms", "decode_ms", "generated_tokens"]
    return {k: sum(a["timings"][k] for a in answers if not a.get("abstained")) for k in keys}


res = {}
rows = []
p = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))]


def search_part():
    server, addr = start_server()
    q = "how does reciprocal rank fusion combine rankings"
    warm = median_ms(lambda: post(addr, "/v1/search", {"query": q, "top_k": 5}))
    server.terminate(); server.wait()
    cold = median_ms(lambda: run(["search", "--json", "-k", "5", q]))
    res["search"] = {"warm_ms": warm, "cold_ms": cold}
    rows.append(f"| search, corpus/, median of 20 | `rag serve` {warm:.1f} ms · `rag search` process {cold:.0f} ms ({cold / warm:.0f}× lower warm) |")


def where(x, total):
    other = total * 1e3 - x["retrieval_ms"] - x["prefill_ms"] - x["decode_ms"]
    return f"retrieval {x['retrieval_ms'] / 1e3:.1f} s, prefill {x['prefill_ms'] / 1e3:.1f} s, decode {x['decode_ms'] / 1e3:.1f} s, load and the rest {other / 1e3:.1f} s"


def batch_part():
    clear_cache()
    t = time.perf_counter()
    seq = [json.loads(run(["ask", "--json", q]).stdout) for q in questions]
    t_seq = time.perf_counter() - t
    s = sums(seq)
    res["batch"] = {"sequential_s": t_seq, "sequential": s, "batch": {}}
    # BATCH_PARALLEL="1 4": one batch run per llm.parallel, so the batched decode's own gain
    # (4 against 1 sequence per step) shows apart from the start-up a batch saves.
    for par in os.environ.get("BATCH_PARALLEL", env.get("RAG_LLM_PARALLEL", "4")).split():
        env["RAG_LLM_PARALLEL"] = par
        clear_cache()
        t = time.perf_counter()
        batch_out = run(["ask", "--batch", "-"], input="\n".join(questions).encode()).stdout
        t_batch = time.perf_counter() - t
        batch = [json.loads(l) for l in batch_out.decode().splitlines()]
        same = sum(a.get("answer") == b.get("answer") for a, b in zip(seq, batch))
        b = sums(batch)
        res["batch"]["batch"][par] = {"batch_s": t_batch, "totals": b, "same_answers": same}
        # Batched decodes overlap, so their per-answer decode times do not add up to wall time:
        # the batch side is split into retrieval, prefill (one prompt at a time) and the rest.
        b_rest = t_batch - (b["retrieval_ms"] + b["prefill_ms"]) / 1e3
        rows.append(f"| {len(questions)} questions, {model} model | {len(questions)} `rag ask` processes {t_seq:.1f} s ({where(s, t_seq)}) · `rag ask --batch`, llm.parallel {par}: {t_batch:.1f} s (retrieval {b['retrieval_ms'] / 1e3:.1f} s, prefill {b['prefill_ms'] / 1e3:.1f} s, batched decode of {b['generated_tokens']} tokens, load and the rest {b_rest:.1f} s): {t_seq / t_batch:.2f}×; {same} of {len(questions)} answers identical |")


def concurrency_part():
    for par in os.environ.get("SERVE_PARALLEL", env.get("RAG_LLM_PARALLEL", "4")).split():
        concurrency_at(par)


def concurrency_at(par):
    eight = questions[:8]
    # Warm-up (the model's pages) with a question outside the eight, whose prompt the server
    # would otherwise keep and reuse.
    warm = questions[8] if len(questions) > 8 else "What is this project about?"

    def ask_all(concurrent):
        # A fresh server per pass: a sequence keeps its last prompt, and the second pass would
        # find the first one's. The prompt cache off for the same reason.
        server, addr = start_server({"RAG_LLM_PROMPT_CACHE_MB": "0", "RAG_LLM_PARALLEL": par})
        post(addr, "/v1/ask", {"question": warm})
        results = [None] * len(eight)

        def one(i):
            t = time.perf_counter()
            a = post(addr, "/v1/ask", {"question": eight[i]})
            results[i] = (a, time.perf_counter() - t)
        t = time.perf_counter()
        if concurrent:
            ths = [threading.Thread(target=one, args=(i,)) for i in range(len(eight))]
            [th.start() for th in ths]; [th.join() for th in ths]
        else:
            for i in range(len(eight)):
                one(i)
        wall = time.perf_counter() - t
        server.terminate(); server.wait()
        toks = sum(a["timings"]["generated_tokens"] for a, _ in results)
        lat = sorted(l for _, l in results)
        ttft = sorted(a["timings"]["ttft_ms"] for a, _ in results)
        # Prefill is computed one prompt at a time either way; what batching can change is
        # the rest of the wall time, the decode steps.
        prefill_s = sum(a["timings"]["prefill_ms"] for a, _ in results) / 1e3
        return {"wall_s": wall, "tok_per_s": toks / wall, "tokens": toks, "prefill_s": prefill_s, "decode_tok_per_s": toks / max(wall - prefill_s, 1e-3),
                "latency_s": lat, "ttft_ms": ttft, "answers": [a["answer"] for a, _ in results]}
    one_stream = ask_all(False)
    eight_clients = ask_all(True)
    res.setdefault("concurrency", {})[par] = {"one": one_stream, "eight": eight_clients}
    same = sum(a == b for a, b in zip(one_stream["answers"], eight_clients["answers"]))
    rows.append(
        f"| 8 clients at once through `rag serve` vs one after another, {model} model, llm.parallel {par} | {eight_clients['wall_s']:.1f} s vs {one_stream['wall_s']:.1f} s; "
        f"{eight_clients['tokens']} vs {one_stream['tokens']} tokens generated, {eight_clients['tok_per_s']:.1f} vs {one_stream['tok_per_s']:.1f} tok/s of wall time "
        f"({eight_clients['tok_per_s'] / one_stream['tok_per_s']:.2f}×); prefill {eight_clients['prefill_s']:.1f} vs {one_stream['prefill_s']:.1f} s; "
        f"outside prefill {eight_clients['decode_tok_per_s']:.1f} vs {one_stream['decode_tok_per_s']:.1f} tok/s "
        f"({eight_clients['decode_tok_per_s'] / one_stream['decode_tok_per_s']:.2f}×); request latency p50 {p(eight_clients['latency_s'], .5):.1f} s, p95 {p(eight_clients['latency_s'], .95):.1f} s "
        f"(one at a time: {p(one_stream['latency_s'], .5):.1f} s); TTFT after admission p50 {p(eight_clients['ttft_ms'], .5):.0f} ms; {same} of 8 answers identical |")


def load_part(seconds=120, clients=6, queue=2):
    server, addr = start_server({"RAG_SERVE_QUEUE": str(queue)})
    counts, lock, waits = {}, threading.Lock(), []
    end = time.time() + seconds

    def client(k):
        i = k
        while time.time() < end:
            req = urllib.request.Request(f"http://{addr}/v1/ask", data=json.dumps({"question": questions[i % len(questions)]}).encode())
            i += clients
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    json.loads(r.read())
                    key = "200"
            except urllib.error.HTTPError as e:
                key = str(e.code)
                if e.code == 503:
                    if e.headers.get("Retry-After", "").isdigit():
                        with lock:
                            waits.append(int(e.headers["Retry-After"]))
                    else:
                        key = "503 without Retry-After"
                    time.sleep(0.2)
            except Exception as e:  # a refused connection, a reset, a timeout: a lost request
                key = f"failed ({type(e).__name__})"
            with lock:
                counts[key] = counts.get(key, 0) + 1
    ths = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    [t.start() for t in ths]; [t.join() for t in ths]
    server.terminate(); server.wait()
    res["load"] = {"counts": counts, "retry_after_s": waits}
    lost = sum(n for k, n in counts.items() if k not in ("200", "503"))
    rows.append(f"| {seconds // 60} min, {clients} clients without pause, serve.queue = {queue} | {counts.get('200', 0)} answered, {counts.get('503', 0)} refused with 503 + Retry-After (median {statistics.median(waits) if waits else 0} s), {lost} lost or failed otherwise |")


import urllib.error
for name, part in [("search", search_part), ("batch", batch_part), ("concurrency", concurrency_part), ("load", load_part)]:
    if name in os.environ.get("SERVE_PARTS", "search,batch,concurrency,load").split(","):
        part()
json.dump(res, open(out, "w"), indent=1)
print("\n".join(rows))
