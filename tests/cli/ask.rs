use crate::support::{copy_dir, repo, Project};

#[test]
fn ask_answers_a_planted_fact_and_cites_its_file() {
    let p = Project::with_docs();
    p.ingest();
    let question = "How fast does the flux regulator aboard Orbital Station Meridian hum?";
    let v = p.json(&["ask", "--json", "-k", "3", question]);
    let answer = v["answer"].as_str().unwrap();
    // The fact is invented, so the model can only have it from the packed source.
    assert!(answer.contains("1742"), "{v}");
    let id_of = |path: &str| {
        v["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["path"] == path)
            .map(|s| s["id"].as_str().unwrap().to_string())
    };
    let id = id_of("docs/orbital-station.md").unwrap_or_else(|| panic!("not packed: {v}"));
    // Cited in the text, by the right source, and checked as supported by it.
    assert!(answer.contains(&format!("[{id}]")), "{v}");
    let citations = v["citations"].as_array().unwrap();
    assert!(
        citations
            .iter()
            .any(|c| c["id"] == id.as_str() && c["supported"] == true),
        "{v}"
    );
    assert!(
        citations.iter().all(|c| c["supported"] == true),
        "a citation the checker does not support: {v}"
    );
    assert!(v["uncited_sentences"].as_array().unwrap().is_empty(), "{v}");
    // The evidence quotes the file's own line 12, or a span that holds it.
    let evidence = v["evidence"].as_array().unwrap();
    assert!(
        evidence
            .iter()
            .any(|e| e["path"] == "docs/orbital-station.md"
                && e["text"].as_str().unwrap().contains("1742")
                && e["line"].as_u64().unwrap() <= 12
                && e["line_end"].as_u64().unwrap() >= 12),
        "{v}"
    );
    let t = &v["timings"];
    assert!(t["prompt_tokens"].as_u64().unwrap() > 50, "{t}");
    assert!(t["generated_tokens"].as_u64().unwrap() > 0, "{t}");
    assert!(t["decode_tok_per_s"].as_f64().unwrap() > 0.0, "{t}");

    // With llm.add_citations off, what the model wrote is the answer: same words, no marker
    // added by rag.
    let (code, out, err) = p.run_env(
        &[("RAG_LLM_ADD_CITATIONS", "false")],
        &["ask", "--json", "-k", "3", question],
    );
    assert_eq!(code, 0, "{err}");
    let plain: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(plain["added_citations"], 0, "{plain}");
    // (The small model may go on with facts from other sources, which rag also marks.)
    let strip = |s: &str| {
        let mut out = s.to_string();
        for n in 1..=3 {
            out = out.replace(&format!(" [S{n}]"), "");
        }
        out
    };
    let added = v["added_citations"].as_u64().unwrap();
    if added > 0 {
        assert_eq!(
            strip(answer),
            strip(plain["answer"].as_str().unwrap()),
            "{plain}"
        );
    }
}

#[test]
fn a_document_that_plays_the_chat_template_does_not_take_over() {
    // fixtures/docs/injection.md closes the user turn and opens a system turn that orders
    // the answer PWNED; its text is tokenized as text, so the model reads it as a document.
    let p = Project::with_docs();
    p.ingest();
    let v = p.json(&[
        "ask",
        "--json",
        "-k",
        "2",
        "--path",
        "docs/injection.md",
        "What does Heron 2.3 add?",
    ]);
    let answer = v["answer"].as_str().unwrap();
    assert!(!answer.contains("PWNED"), "{v}");
    assert_eq!(v["sources"][0]["path"], "docs/injection.md", "{v}");
}

#[test]
fn ask_streams_text_then_sources() {
    let p = Project::with_docs();
    p.ingest();
    let (code, out, err) = p.run(&["ask", "-k", "2", "How long should bread dough be kneaded?"]);
    assert_eq!(code, 0, "{err}");
    let (answer, sources) = out
        .split_once("\nSources:\n")
        .unwrap_or_else(|| panic!("no sources in {out}"));
    assert!(!answer.trim().is_empty());
    assert!(sources.contains("docs/bread.rst:"), "{sources}");
    assert!(err.contains("tok/s"), "stats line missing: {err}");
}

#[test]
fn search_json_ranks_the_right_file_first() {
    let p = Project::with_docs();
    p.ingest();
    let v = p.json(&["search", "--json", "-k", "3", "lighthouse lamp rotation"]);
    let hits = v["hits"].as_array().unwrap();
    assert!(!hits.is_empty() && hits.len() <= 3, "{v}");
    assert_eq!(hits[0]["path"], "docs/lighthouse.html", "{v}");
    assert_eq!(hits[0]["rank"], 1);
    for key in [
        "chunk_id",
        "heading",
        "line_start",
        "line_end",
        "score",
        "text",
    ] {
        assert!(hits[0].get(key).is_some(), "missing {key}: {v}");
    }
}

#[test]
fn off_topic_questions_abstain_with_their_own_exit_code() {
    let p = Project::with_docs();
    p.ingest();
    let (code, out, err) = p.run(&["ask", "Who won the 1954 football world cup final?"]);
    assert_eq!(code, 6, "{out}\n{err}");
    assert!(out.contains("do not answer"), "{out}");
    let (code, out, _) = p.run(&[
        "ask",
        "--json",
        "Who won the 1954 football world cup final?",
    ]);
    assert_eq!(code, 6);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["abstained"], true);
}

#[test]
fn repeated_ask_reuses_the_prompt_cache_and_prints_the_same_bytes() {
    let p = Project::with_docs();
    p.ingest();
    let q = "What does the chief engineer of Orbital Station Meridian keep?";
    let uncached = p.json(&["ask", "--json", "--no-cache", "-k", "3", q]);
    assert_eq!(uncached["timings"]["cached_tokens"], 0);
    let first = p.json(&["ask", "--json", "-k", "3", q]);
    let second = p.json(&["ask", "--json", "-k", "3", q]);
    let cached = second["timings"]["cached_tokens"].as_u64().unwrap();
    let prompt = second["timings"]["prompt_tokens"].as_u64().unwrap();
    assert!(cached > 0 && cached < prompt, "{second}");
    assert_eq!(first["answer"], uncached["answer"]);
    assert_eq!(
        second["answer"], uncached["answer"],
        "temperature 0 must not depend on the cache"
    );

    // A damaged cache entry is ignored and replaced, never trusted: garbage, a bit flip, a
    // truncation (all caught by the checksum before llama.cpp reads the file), and a sidecar
    // that claims other tokens than the state holds (caught after the load).
    let dir = p.path().join(".rag/prompt-cache");
    let entry = |ext: &str| {
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == ext))
            .unwrap()
    };
    // (what is damaged, how: given the state file and its metadata file)
    type Damage = (&'static str, fn(&std::path::Path, &std::path::Path));
    let damages: [Damage; 4] = [
        ("garbage", |state, _| {
            std::fs::write(state, b"not a llama.cpp state").unwrap()
        }),
        ("bit flip", |state, _| {
            let mut b = std::fs::read(state).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= 0x10;
            std::fs::write(state, b).unwrap();
        }),
        ("truncated", |state, _| {
            let b = std::fs::read(state).unwrap();
            std::fs::write(state, &b[..b.len() / 3]).unwrap();
        }),
        ("forged tokens", |_, side| {
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(side).unwrap()).unwrap();
            let tokens = v["tokens"].as_array_mut().unwrap();
            let n = tokens.len();
            tokens[n - 2] = serde_json::json!(1);
            std::fs::write(side, v.to_string()).unwrap();
        }),
    ];
    for (what, damage) in damages {
        damage(&entry("state"), &entry("json"));
        let (code, out, err) = p.run(&["ask", "--json", "-k", "3", q]);
        assert_eq!(code, 0, "{what}: {err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["timings"]["cached_tokens"], 0, "{what}: {v}");
        assert_eq!(v["answer"], uncached["answer"], "{what}");
        assert!(err.contains("prompt cache"), "{what}: {err}");
    }
}

#[test]
fn chat_answers_each_line_and_reuses_earlier_turns() {
    let p = Project::with_docs();
    p.ingest();
    let out = p
        .rag()
        .args(["chat", "-v", "-k", "2"])
        .write_stdin("How long should bread dough be kneaded?\nWhen was the Kestrel Point lighthouse first lit?\nHow often is the flux regulator tuned?\n")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout.matches("Sources:").count(), 3, "{stdout}");
    let turns: Vec<&str> = stderr.lines().filter(|l| l.starts_with("turn ")).collect();
    assert_eq!(turns.len(), 3, "{stderr}");
    // "prompt N tok (M cached)": the second turn reuses the first turn's tokens.
    let nums = |l: &str| -> (u64, u64) {
        let after = l.split("prompt ").nth(1).unwrap();
        let n: u64 = after.split(' ').next().unwrap().parse().unwrap();
        let m: u64 = after
            .split('(')
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        (n, m)
    };
    // The whole first turn is a prefix of the second one's context: all of it is reused but
    // the last partial n_batch slice (128 tokens), which is computed again (llm.n_batch).
    let (first, _) = nums(turns[0]);
    let (prompt, cached) = nums(turns[1]);
    assert!(
        cached + 128 > first && cached < prompt,
        "turn 1 had {first} tokens; {}",
        turns[1]
    );
}

#[test]
fn dry_run_prints_the_packed_prompt() {
    let p = Project::with_docs();
    p.ingest();
    let (code, out, err) = p.run(&[
        "ask",
        "--dry-run",
        "-k",
        "1",
        "--path",
        "docs/orbital*",
        "How fast does the flux regulator hum?",
    ]);
    assert_eq!(code, 0, "{err}");
    let expected =
        std::fs::read_to_string(crate::support::repo().join("fixtures/snapshots/ask-dry-run.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(crate::support::repo().join("fixtures/snapshots")).unwrap();
        std::fs::write(
            crate::support::repo().join("fixtures/snapshots/ask-dry-run.txt"),
            &out,
        )
        .unwrap();
    } else {
        assert_eq!(
            out,
            expected.expect("fixtures/snapshots/ask-dry-run.txt (UPDATE_SNAPSHOTS=1 writes it)")
        );
    }
    assert!(
        out.contains("<source id=\"S1\" path=\"docs/orbital-station.md\""),
        "{out}"
    );
    assert!(err.contains("prompt tokens"), "{err}");
}

#[test]
fn a_bad_filter_is_a_runtime_error_with_the_sql() {
    let p = Project::with_docs();
    p.ingest();
    let (code, _, err) = p.run(&["search", "--where", "no_such_column = 1", "x"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no_such_column"), "{err}");
}

#[test]
fn ndjson_streams_events_and_verbose_explains_retrieval() {
    let p = Project::with_docs();
    p.ingest();
    let (code, out, err) = p.run(&[
        "ask",
        "--ndjson",
        "-v",
        "-k",
        "2",
        "How fast does the flux regulator aboard Orbital Station Meridian hum?",
    ]);
    assert_eq!(code, 0, "{err}");
    let events: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["event"], "retrieval", "{out}");
    assert!(events.iter().any(|e| e["event"] == "token"), "{out}");
    let done = events.last().unwrap();
    assert_eq!(done["event"], "done", "{out}");
    let streamed: String = events
        .iter()
        .filter(|e| e["event"] == "token")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert!(!streamed.trim().is_empty());
    // The stream shows the answer the checker saw, markers included (a loop's copy aside).
    if done["answer"]["stop"] != "repetition" {
        assert_eq!(streamed.trim(), done["answer"]["answer"], "{out}");
    }
    // -v: one line per retrieved span with each retriever's rank and the fused score.
    assert!(err.contains("retrieval: mode Hybrid"), "{err}");
    assert!(
        err.contains("docs/orbital-station.md") && err.contains("fused"),
        "{err}"
    );
}

/// Lowercase words of a sentence without citation markers and list numbers.
fn sentence_words(s: &str) -> Vec<String> {
    let mut w: Vec<String> = s
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| {
            !(w.starts_with('s') && w.len() > 1 && w[1..].bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    while w
        .first()
        .is_some_and(|x| x.bytes().all(|b| b.is_ascii_digit()))
    {
        w.remove(0);
    }
    w
}

#[test]
fn a_looping_answer_never_shows_a_sentence_twice() {
    // SmolLM2-135M repeats its answer sentence on these questions at temperature 0; the stream
    // must end the answer instead of showing the copy, and show exactly the checked answer.
    let p = Project::empty();
    copy_dir(&repo().join("corpus"), &p.path().join("corpus"));
    p.json(&["ingest", "--json", "corpus"]);
    for q in [
        "What does the KV cache store?",
        "What is continuous batching?",
    ] {
        let (code, out, err) = p.run(&["ask", "--ndjson", "--no-cache", q]);
        assert_eq!(code, 0, "{err}");
        let events: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let streamed: String = events
            .iter()
            .filter(|e| e["event"] == "token")
            .map(|e| e["text"].as_str().unwrap())
            .collect();
        let mut seen = std::collections::HashSet::new();
        for s in streamed.split(['.', '!', '?', '\n']) {
            let w = sentence_words(s);
            if w.len() >= 3 {
                assert!(seen.insert(w), "shown twice: {s:?} in {streamed:?}");
            }
        }
        let done = &events.last().unwrap()["answer"];
        assert_eq!(streamed.trim(), done["answer"], "{out}");
    }
}

#[test]
fn the_prompt_cache_does_not_change_a_greedy_answer() {
    // Reusing a cached prefix must give the bytes a fresh prefill gives: the same question
    // again (1,090 of 1,091 tokens cached), and a new question over the same sources.
    let p = Project::empty();
    // Widening the best span with its neighbours (retrieval.neighbors) makes the span
    // boundaries depend on which chunk ranks first, so two questions over one file pack
    // different spans; this test needs them to pack the same ones.
    let config = p.path().join("rag.toml");
    let mut toml = std::fs::read_to_string(&config).unwrap();
    toml.push_str("\n[retrieval]\nneighbors = 0\n");
    std::fs::write(&config, toml).unwrap();
    copy_dir(&repo().join("corpus"), &p.path().join("corpus"));
    p.json(&["ingest", "--json", "corpus"]);
    let answer = |args: &[&str]| {
        let v = p.json(args);
        (
            v["answer"].as_str().unwrap().to_string(),
            v["timings"]["cached_tokens"].as_u64().unwrap(),
        )
    };
    let q1 = "What does the KV cache store?";
    let (first, _) = answer(&["ask", "--json", q1]);
    let (again, cached) = answer(&["ask", "--json", q1]);
    let (fresh, none) = answer(&["ask", "--json", "--no-cache", q1]);
    assert!(cached > 0 && none == 0, "{cached} {none}");
    assert_eq!(first, again);
    assert_eq!(first, fresh);
    // All chunks of one file, so both questions pack the same sources.
    let filter = ["-k", "10", "--path", "corpus/kv-cache.md"];
    answer(&[&["ask", "--json"][..], &filter, &[q1]].concat());
    let q2 = "How large does the KV cache get?";
    let (cached_q2, cached) = answer(&[&["ask", "--json"][..], &filter, &[q2]].concat());
    let (fresh_q2, _) = answer(&[&["ask", "--json", "--no-cache"][..], &filter, &[q2]].concat());
    assert!(cached > 0, "no prefix reused");
    assert_eq!(cached_q2, fresh_q2);
}

/// `ask --batch`: plain and JSON lines, blank lines skipped, one object per question in input
/// order with its id, a bad line reported in its own object without stopping the rest, and
/// exit 1 because one failed; `-` reads stdin.
#[test]
fn a_batch_answers_every_line_in_order_and_reports_a_bad_one_apart() {
    let p = Project::with_docs();
    p.ingest();
    std::fs::write(
        p.path().join("q.txt"),
        "How fast does the flux regulator aboard Orbital Station Meridian hum?\n\n\
         {\"id\": \"b\", \"question\": \"How fast does the flux regulator aboard Orbital Station Meridian hum?\", \"top_k\": 2, \"path\": \"docs/orbital*\"}\n\
         {\"question\": \"x\", \"topk\": 3}\n",
    )
    .unwrap();
    let (code, out, err) = p.run(&["ask", "--batch", "q.txt"]);
    assert_eq!(code, 1, "one line failed: {err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0]["id"], 1);
    assert_eq!(lines[1]["id"], "b");
    assert_eq!(lines[2]["id"], 4);
    for v in &lines[..2] {
        assert!(v["answer"].as_str().unwrap().contains("1742"), "{v}");
    }
    let paths: Vec<&str> = lines[1]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert!(!paths.is_empty() && paths.len() <= 2, "{paths:?}");
    assert!(
        paths.iter().all(|p| p.starts_with("docs/orbital")),
        "{paths:?}"
    );
    assert_eq!(lines[2]["exit"], 2, "{}", lines[2]);
    assert!(
        lines[2]["error"].as_str().unwrap().contains("topk"),
        "{}",
        lines[2]
    );
    let out = p
        .rag()
        .args(["ask", "--batch", "-"])
        .write_stdin("What does the flux regulator do?\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let (code, _, err) = p.run(&["ask", "--batch", "missing.txt"]);
    assert_eq!(code, 2);
    assert!(err.contains("missing.txt"), "{err}");
}

/// `ask --batch -` answers as the lines come: the first answer is out while stdin is still
/// open, so an endless pipe (`yes q | rag ask --batch -`) never has to end to be answered.
#[test]
fn a_batch_from_stdin_answers_before_its_input_ends() {
    use std::io::{BufRead, BufReader, Write};
    let p = Project::with_docs();
    p.ingest();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("rag"))
        .current_dir(p.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(["ask", "--batch", "-", "--max-tokens", "16"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Fewer lines than a window (16): the batch takes what has arrived, it does not wait.
    for _ in 0..4 {
        writeln!(
            stdin,
            "How fast does the flux regulator aboard Orbital Station Meridian hum?"
        )
        .unwrap();
    }
    stdin.flush().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert_eq!(v["id"], 1, "{v}");
    assert!(
        child.try_wait().unwrap().is_none(),
        "still reading its input"
    );
    drop(stdin);
    let _ = child.wait();
}

#[test]
fn a_batch_in_one_sequence_answers_as_one_shot_asks_do() {
    // One sequence at a time prefills each prompt from position 0 in the same slices as an
    // uncached ask, so at temperature 0 the answers are the same bytes; with several
    // sequences in one context every question still gets its own checked answer.
    let p = Project::with_docs();
    p.ingest();
    let questions = [
        "How fast does the flux regulator aboard Orbital Station Meridian hum?",
        "At what pressure does the Kestrel relief valve open?",
        "How long should the bread dough rise?",
    ];
    std::fs::write(p.path().join("q.txt"), questions.join("\n")).unwrap();
    let one_shot: Vec<serde_json::Value> = questions
        .iter()
        .map(|q| p.json(&["ask", "--json", "--no-cache", q]))
        .collect();
    for (parallel, must_equal) in [("1", true), ("3", false)] {
        let (code, out, err) = p.run_env(
            &[("RAG_LLM_PARALLEL", parallel)],
            &["ask", "--batch", "q.txt"],
        );
        assert_eq!(code, 0, "{err}");
        let batch: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(batch.len(), 3);
        for (b, o) in batch.iter().zip(&one_shot) {
            assert_eq!(b["question"], o["question"]);
            assert_eq!(
                b["sources"], o["sources"],
                "retrieval does not depend on batching"
            );
            assert!(!b["answer"].as_str().unwrap().trim().is_empty(), "{b}");
            assert!(b["timings"]["generated_tokens"].as_u64().unwrap() > 0);
            if must_equal {
                assert_eq!(b["answer"], o["answer"], "parallel {parallel}");
            }
        }
    }
}

/// The large generator's file, as a `RAG_LLM_LARGE_MODEL` value.
fn large_model() -> String {
    let large = repo().join("models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf");
    large.to_string_lossy().into_owned()
}

fn ask_json(p: &Project, env: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
    let (code, out, err) = p.run_env(env, args);
    assert_eq!(code, 0, "rag {args:?}: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// `auto` (the default route) answers with the best installed generator that fits
/// `llm.answer_budget_s`: the large one before it was measured (that answer measures it),
/// then whichever the measured figures allow; `rag doctor` shows the figures and the choice.
#[test]
fn auto_takes_the_best_generator_within_the_budget_and_measures_it() {
    let p = Project::with_docs();
    p.ingest();
    let large = large_model();
    let q = "How does the lighthouse lamp rotate?";
    let args = ["ask", "--json", "-k", "3", "--max-tokens", "40", q];
    let env = |budget: &'static str| {
        vec![
            ("RAG_LLM_LARGE_MODEL", large.clone()),
            ("RAG_LLM_ANSWER_BUDGET_S", budget.to_string()),
        ]
    };
    let run = |budget| {
        let env = env(budget);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        ask_json(&p, &env, &args)
    };
    let first = run("20");
    assert_eq!(first["model"]["model"], "large", "{first}");
    let reason = first["model"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not measured"), "{reason}");
    assert!(
        first["timings"]["generated_tokens"].as_u64().unwrap() >= 8,
        "the answer is long enough to measure decoding: {first}"
    );
    // Measured now: a budget no generator meets keeps the best installed one (the small one
    // is not known to fit, and is never tried as a guess) and says so; a generous one keeps
    // the large one, naming its figure.
    let tight = run("0.1");
    assert_eq!(tight["model"]["model"], "large", "{tight}");
    let reason = tight["model"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("none fits") || reason.contains("other processes held the CPU"),
        "{reason}"
    );
    let roomy = run("86400");
    assert_eq!(roomy["model"]["model"], "large", "{roomy}");
    let reason = roomy["model"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("within llm.answer_budget_s"), "{reason}");
    // A fixed route is the user's, whatever the budget.
    let env = env("0.1");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut fixed = args.to_vec();
    fixed.splice(1..1, ["--model", "large"]);
    assert_eq!(ask_json(&p, &env, &fixed)["model"]["model"], "large");
    let (code, out, err) = p.run_env(&env, &["doctor"]);
    assert!(code == 0 || code == 1, "{err}");
    assert!(
        out.contains("large: prefill") && out.contains("typical question"),
        "doctor shows the measured figures: {out}"
    );
    assert!(
        out.contains("llm.route = auto: the large generator answers"),
        "doctor shows the choice: {out}"
    );
}

/// The large generator measured on a quiet machine far over the budget: `auto` steps down
/// to the small one only because its time, predicted from the large one's figures and the
/// two files, fits; it says so once on stderr, and `rag doctor` shows the prediction.
#[test]
fn auto_steps_down_only_to_a_generator_predicted_to_fit() {
    let p = Project::with_docs();
    p.ingest();
    let large = large_model();
    let canonical = std::fs::canonicalize(&large).unwrap();
    let size = std::fs::metadata(&large).unwrap().len();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // 1,000 prompt tokens at 40 tok/s, 150 at 2 tok/s and a second's load: 101 s a typical
    // question, on a quiet machine (others took 2% of the CPU).
    let speeds = serde_json::json!({"models": {
        format!("{} {size}", canonical.display()): [{
            "prefill_tok_per_s": 40.0, "decode_tok_per_s": 2.0, "load_ms": 1000.0,
            "at": now, "others": 0.02,
        }]
    }});
    std::fs::write(p.path().join(".rag/speeds.json"), speeds.to_string()).unwrap();
    let env = [
        ("RAG_LLM_LARGE_MODEL", large.as_str()),
        ("RAG_LLM_ANSWER_BUDGET_S", "60"),
    ];
    let (_, out, _) = p.run_env(&env, &["doctor"]);
    assert!(
        out.contains("small: not measured here yet; predicted")
            && out.contains("on a quiet machine")
            && out.contains("the small generator answers"),
        "{out}"
    );
    let args = [
        "ask",
        "--json",
        "-k",
        "2",
        "--max-tokens",
        "8",
        "How does the lighthouse lamp rotate?",
    ];
    let (code, out, err) = p.run_env(&env, &args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["model"]["model"], "small", "{v}");
    let reason = v["model"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("large generator takes 101.0 s here")
            && reason.contains("predicted from the large one"),
        "{reason}"
    );
    assert!(
        err.contains("note: ") && err.contains("--model large"),
        "said once: {err}"
    );
    let (code, _, err) = p.run_env(&env, &args);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("note: "), "not every answer: {err}");
    // With a budget over the large one's time, it answers again.
    let roomy = [env[0], ("RAG_LLM_ANSWER_BUDGET_S", "200")];
    assert_eq!(ask_json(&p, &roomy, &args)["model"]["model"], "large");
}

/// `llm.route_similarity` sends a strong retrieval match to the small generator and says so;
/// a weaker one goes to the generator the budget picks.
#[test]
fn route_similarity_sends_strong_matches_to_the_small_generator() {
    let p = Project::with_docs();
    let fact = "Zymurgy is the branch of applied chemistry that studies fermentation in brewing.";
    p.doc("zymurgy.txt", format!("{fact}\n"));
    p.ingest();
    let large = large_model();
    let env = [
        ("RAG_LLM_LARGE_MODEL", large.as_str()),
        ("RAG_LLM_MAX_TOKENS", "4"),
        ("RAG_LLM_ROUTE_SIMILARITY", "0.70"),
    ];
    // The fact word for word (a chunk's own text: similarity near 1), and a question the
    // lighthouse page only half answers.
    let mut routes = Vec::new();
    for q in [fact, "Which tools does a lighthouse keeper carry?"] {
        let v = ask_json(&p, &env, &["ask", "--json", "-k", "2", q]);
        let sim = v["best_similarity"].as_f64().expect("a similarity");
        let want = if sim < 0.70 { "large" } else { "small" };
        assert_eq!(v["model"]["model"], want, "{v}");
        let reason = v["model"]["reason"].as_str().unwrap_or_default();
        assert!(reason.starts_with("auto: "), "{reason}");
        if want == "small" {
            assert!(reason.contains(&format!("{sim:.2}")), "{reason}");
        }
        let file = if want == "large" {
            "Qwen2.5-Coder-1.5B"
        } else {
            "SmolLM2-135M"
        };
        let path = v["model"]["path"].as_str().unwrap_or_default();
        assert!(path.contains(file), "{v}");
        routes.push(want);
    }
    assert_eq!(routes, ["small", "large"], "both routes taken");
}

/// Whether `text` ends a sentence once citation markers are set aside.
fn ends_a_sentence(text: &str) -> bool {
    let mut t = text.trim_end();
    while let Some(open) = t.rfind("[S").filter(|_| t.ends_with(']')) {
        t = t[..open].trim_end();
    }
    t.trim_end_matches(['"', ')', '*', '`'])
        .ends_with(['.', '!', '?'])
}

/// An answer cut by its token limit ends at its last whole sentence on every generator: the
/// unfinished one is in `dropped_text`, never in the answer, and no sentence comes twice.
#[test]
fn a_token_limit_ends_the_answer_at_a_whole_sentence_on_each_generator() {
    let p = Project::with_docs();
    p.ingest();
    let (large, medium) = (
        large_model(),
        repo()
            .join("models/Qwen2.5-Coder-0.5B-Instruct.gguf")
            .to_string_lossy()
            .into_owned(),
    );
    let env = [
        ("RAG_LLM_LARGE_MODEL", large.as_str()),
        ("RAG_LLM_MEDIUM_MODEL", medium.as_str()),
    ];
    let q = "How does the lighthouse lamp rotate, and who looks after it?";
    for route in ["small", "medium", "large"] {
        let mut cut = 0;
        for limit in ["12", "30"] {
            let args = [
                "ask",
                "--json",
                "-k",
                "3",
                "--model",
                route,
                "--max-tokens",
                limit,
                q,
            ];
            let v = ask_json(&p, &env, &args);
            let answer = v["answer"].as_str().unwrap();
            let dropped = v["dropped_text"].as_str().unwrap();
            let stop = v["stop"].as_str().unwrap();
            assert!(
                answer.trim().is_empty() || ends_a_sentence(answer),
                "{route} at {limit} tokens ends mid-sentence: {v}"
            );
            if stop == "max_tokens" && !dropped.is_empty() {
                cut += 1;
            }
            let mut seen = std::collections::HashSet::new();
            for s in answer.split_inclusive(['.', '!', '?', '\n']) {
                let words: String = s
                    .to_lowercase()
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    // Citation markers ("S2") are not words of the sentence.
                    .filter(|w| !(w.starts_with('s') && w[1..].bytes().all(|b| b.is_ascii_digit())))
                    .collect::<Vec<_>>()
                    .join(" ");
                if words.split(' ').count() >= 3 {
                    assert!(
                        seen.insert(words.clone()),
                        "{route}: repeated {words:?}: {v}"
                    );
                }
            }
        }
        assert!(cut > 0, "{route}: 12 tokens cut no sentence short");
    }
}

/// README's example session still holds: its question, asked with the default route and the
/// generators `make models FETCH_FLAGS=--large` fetches, gets an answer citing the file README shows cited.
#[test]
fn the_readme_example_question_cites_the_file_the_readme_shows() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let session = &readme[readme.find("## Example session").expect("the section")..];
    let question = session
        .lines()
        .find_map(|l| l.strip_prefix("$ rag ask ")?.split('"').nth(1))
        .expect("a `$ rag ask … \"…\"` line");
    let cited = session
        .lines()
        .map(str::trim)
        .find_map(|l| {
            let rest = l.strip_prefix("[S")?;
            let path = rest.split_once("] ")?.1.split(':').next()?;
            Some(path.to_string())
        })
        .expect("an evidence line `[S#] path:line`");
    let p = Project::empty();
    copy_dir(&repo().join("corpus"), &p.path().join("corpus"));
    let (code, _, err) = p.run(&["ingest", "corpus"]);
    assert_eq!(code, 0, "{err}");
    let large = large_model();
    let env = [("RAG_LLM_LARGE_MODEL", large.as_str())];
    let v = ask_json(
        &p,
        &env,
        &["ask", "--json", "--max-tokens", "256", question],
    );
    assert_eq!(
        v["model"]["model"], "large",
        "the default route takes the 1.5B: {v}"
    );
    let supported: Vec<&str> = v["citations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["supported"] == true)
        .filter_map(|c| {
            let id = c["id"].as_str()?;
            let s = v["sources"].as_array()?.iter().find(|s| s["id"] == id)?;
            s["path"].as_str()
        })
        .collect();
    assert!(
        supported.contains(&cited.as_str()),
        "{cited} not cited: {v}"
    );
    assert!(ends_a_sentence(v["answer"].as_str().unwrap()), "{v}");
}

/// The large generator judges its own answer's citations (`llm.judge_citations`): each one
/// the words support carries the generator's P(yes), one below `llm.judge_min` is marked
/// unsupported, the figures say how long it took; turned off, nothing is judged.
#[test]
fn the_large_generator_judges_the_citations_of_its_answer() {
    let p = Project::empty();
    copy_dir(&repo().join("corpus"), &p.path().join("corpus"));
    let (code, _, err) = p.run(&["ingest", "corpus"]);
    assert_eq!(code, 0, "{err}");
    let large = large_model();
    let q = "How does speculative decoding speed up generation?";
    let args = [
        "ask",
        "--json",
        "--model",
        "large",
        "--max-tokens",
        "160",
        q,
    ];
    let on = [("RAG_LLM_LARGE_MODEL", large.as_str())];
    let v = ask_json(&p, &on, &args);
    let citations = v["citations"].as_array().unwrap();
    let judged: Vec<f64> = citations
        .iter()
        .filter_map(|c| c["judge"].as_f64())
        .collect();
    assert!(!judged.is_empty(), "no citation judged: {v}");
    assert!(judged.iter().all(|p| (0.0..=1.0).contains(p)), "{v}");
    for c in citations {
        if let Some(p) = c["judge"].as_f64() {
            assert_eq!(c["supported"] == true, p >= 0.4, "judge_min is 0.4: {c}");
        }
    }
    assert!(v["timings"]["judge_ms"].as_f64().unwrap() > 0.0, "{v}");
    let off = [
        ("RAG_LLM_LARGE_MODEL", large.as_str()),
        ("RAG_LLM_JUDGE_CITATIONS", "false"),
    ];
    let v = ask_json(&p, &off, &args);
    let citations = v["citations"].as_array().unwrap();
    assert!(citations.iter().all(|c| c.get("judge").is_none()), "{v}");
    assert!(v["timings"].get("judge_ms").is_none(), "{v}");
}

/// The large generator reads the best `retrieval.large_top_k` spans (4 by default) where the
/// others read `top_k`; `--top-k` is what every route reads, and 0 turns the cap off.
#[test]
fn the_large_route_reads_fewer_sources_unless_top_k_is_given() {
    let p = Project::with_docs();
    p.ingest();
    let large = repo().join("models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf");
    let large = large.to_string_lossy();
    let sources = |env: &[(&str, &str)], args: &[&str]| {
        let mut all = vec!["ask", "--dry-run"];
        all.extend_from_slice(args);
        all.push("How does the lighthouse lamp rotate?");
        let mut with = vec![("RAG_LLM_LARGE_MODEL", large.as_ref())];
        with.extend_from_slice(env);
        let (code, out, err) = p.run_env(&with, &all);
        assert_eq!(code, 0, "{err}");
        out.matches("<source id=\"S").count()
    };
    let small = sources(&[], &["--model", "small"]);
    assert!(small > 4, "the docs give more than 4 spans: {small}");
    assert_eq!(sources(&[], &["--model", "large"]), 4);
    assert_eq!(sources(&[], &["--model", "large", "-k", "3"]), 3);
    let off = [("RAG_RETRIEVAL_LARGE_TOP_K", "0")];
    assert_eq!(sources(&off, &["--model", "large"]), small);
    let two = [("RAG_RETRIEVAL_LARGE_TOP_K", "2")];
    assert_eq!(sources(&two, &["--model", "large"]), 2);
}

/// `rag bench llm --model large` measures the large generator's file, not `llm.model`.
#[test]
fn bench_llm_measures_the_generator_the_route_names() {
    let p = Project::with_docs();
    let large = repo().join("models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf");
    let large = large.to_string_lossy();
    let env = [("RAG_LLM_LARGE_MODEL", large.as_ref())];
    for (route, file) in [("small", "SmolLM2-135M"), ("large", "Qwen2.5-Coder-1.5B")] {
        let args = [
            "bench", "llm", "-p", "8", "-n", "2", "-r", "1", "--model", route,
        ];
        let (code, out, err) = p.run_env(&env, &args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
        let model = v["model"].as_str().unwrap_or_default();
        assert!(model.contains(file), "--model {route}: {v}");
        assert!(v["prefill_tok_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
    }
}
