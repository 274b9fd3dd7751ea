//! Tests of the store.

//! The store on its own, against a temporary local table with 4-dimensional vectors: the
//! writes an ingest makes (replace, remove), both searches, and the checks that keep
//! vectors of different models apart.
use super::*;

fn meta() -> IndexMeta {
    IndexMeta::new(
        ModelInfo {
            name: "test-model".into(),
            dim: 4,
            file_hash: "abc".into(),
            pooling: "mean".into(),
            passage_prefix: String::new(),
        },
        ChunkMeta {
            max_tokens: 200,
            min_tokens: 120,
            overlap_tokens: 0,
        },
        PathBuf::from("/project"),
    )
}

fn state(path: &str, hash: &str, chunks: u32) -> FileState {
    FileState {
        path: path.into(),
        hash: hash.into(),
        size: 10,
        mtime_ns: 1,
        chunks,
    }
}

fn row<'a>(id: &'a str, path: &'a str, text: &'a str, vector: &'a [f32]) -> Row<'a> {
    Row {
        id,
        path,
        heading: "Guide",
        line_start: 1,
        line_end: 2,
        text,
        file_hash: "h",
        vector,
    }
}

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let loc = Location::Local(dir.path().join(".rag"));
    let store = Store::open_or_create(&loc, meta()).unwrap();
    (dir, store)
}

#[test]
fn files_written_replaced_and_removed_keep_one_copy_of_each_chunk() {
    let (_dir, s) = open();
    let (x, y) = ([1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]);
    s.replace_files(
        &[state("a.md", "h1", 2), state("b.md", "h2", 1)],
        &[],
        &[
            row("a1", "a.md", "otters hold hands", &x),
            row("a2", "a.md", "otters sleep", &x),
            row("b1", "b.md", "kestrel valve pressure", &y),
        ],
    )
    .unwrap();
    assert_eq!(s.chunk_ids().unwrap(), vec!["a1", "a2", "b1"]);
    let states = s.file_states().unwrap();
    assert_eq!(states["a.md"], state("a.md", "h1", 2));
    // A changed file: its old chunks go, the new ones come, the other file stays.
    s.replace_files(
        &[state("a.md", "h3", 1)],
        &["a.md"],
        &[row("a3", "a.md", "otters float", &x)],
    )
    .unwrap();
    assert_eq!(s.chunk_ids().unwrap(), vec!["a3", "b1"]);
    assert_eq!(s.file_states().unwrap()["a.md"].hash, "h3");
    assert_eq!(s.remove_files(&["b.md"]).unwrap(), 1);
    assert_eq!(s.chunk_ids().unwrap(), vec!["a3"]);
    assert!(!s.file_states().unwrap().contains_key("b.md"));
    let st = s.stats().unwrap();
    assert_eq!((st.chunks, st.files), (1, 1));
}

#[test]
fn vector_and_text_search_rank_and_filter() {
    let (_dir, s) = open();
    let v = |a: f32, b: f32| [a, b, 0.0, 0.0];
    let (near, mid, far) = (v(1.0, 0.1), v(0.6, 0.8), v(0.0, 1.0));
    s.replace_files(
        &[state("a.md", "h1", 2), state("b.md", "h2", 1)],
        &[],
        &[
            row("near", "a.md", "the relief valve opens at 8 bar", &near),
            row("mid", "a.md", "bread dough rises overnight", &mid),
            row("far", "b.md", "lighthouse first lit in 1871", &far),
        ],
    )
    .unwrap();
    let hits = s.vector_search(&[1.0, 0.0, 0.0, 0.0], 3, None).unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["near", "mid", "far"]);
    assert!(
        hits[0].score > 0.99 && hits[2].score.abs() < 1e-6,
        "{hits:?}"
    );
    let only_b = s
        .vector_search(&[1.0, 0.0, 0.0, 0.0], 3, Some("path = 'b.md'"))
        .unwrap();
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0].path, "b.md");
    s.refresh_text_index().unwrap();
    let text = s.text_search("lighthouse", 5, None).unwrap();
    assert_eq!(text.len(), 1);
    assert_eq!((text[0].id.as_str(), text[0].line_start), ("far", 1));
    assert_eq!(s.paths_within("path = 'a.md'").unwrap(), vec!["a.md"]);
    let chunks = s.chunks_of("a.md", None).unwrap();
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0].vector.len(), 4);
}

#[test]
fn an_index_refuses_other_models_and_chunk_settings_and_reopens_as_written() {
    let (dir, s) = open();
    let loc = Location::Local(dir.path().join(".rag"));
    assert!(Store::exists(&loc).unwrap());
    assert_eq!(s.check(&meta()).ok(), Some(()));
    let mut other = meta();
    other.embed.name = "other-model".into();
    let e = s.check(&other).unwrap_err();
    assert!(format!("{e:#}").contains("--rebuild"), "{e:#}");
    assert!(s.check_model(&other.embed).is_err());
    let mut chunked = meta();
    chunked.chunk.max_tokens = 100;
    assert!(s.check(&chunked).is_err());
    drop(s);
    let again = Store::open(&loc).unwrap();
    assert_eq!(again.meta, meta());
    let none = Location::Local(dir.path().join("nothing"));
    let e = Store::open(&none).err().expect("no index there");
    assert!(format!("{e:#}").contains("rag ingest"), "{e:#}");
}
