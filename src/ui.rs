//! The one place that prints. stdout is data (answers, hits, `--json`); stderr is for people
//! (progress bars, summaries, warnings, errors). Progress bars hide themselves when stderr is
//! not a terminal or with `-q`, so scripts and CI logs stay clean.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug, Clone, Copy)]
pub struct Ui {
    pub quiet: bool,
}

impl Ui {
    /// Writes data to stdout and flushes, so a piped reader sees it at once. A closed pipe
    /// surfaces as an error that `main` turns into a quiet success.
    pub fn out(&self, text: &str) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        out.write_all(printable(text).as_bytes())?;
        out.flush()
    }

    pub fn outln(&self, text: &str) -> std::io::Result<()> {
        self.out(&format!("{text}\n"))
    }

    /// A JSON value on one line of stdout.
    pub fn json<T: serde::Serialize>(&self, value: &T) -> anyhow::Result<()> {
        let line = serde_json::to_string(value)?;
        Ok(self.outln(&line)?)
    }

    /// Summaries and notes for people; silent with `-q`.
    pub fn info(&self, text: &str) {
        if !self.quiet {
            err_line(text);
        }
    }

    /// An interactive prompt on stderr (stdout stays answers only).
    pub fn prompt(&self, text: &str) -> std::io::Result<()> {
        let mut err = std::io::stderr().lock();
        err.write_all(text.as_bytes())?;
        err.flush()
    }

    /// A line on stderr that the user asked for (`--stats`, `-v`); shown even with `-q`.
    pub fn stderr(&self, text: &str) {
        err_line(text);
    }

    /// Problems worth knowing about that did not stop the command; shown even with `-q`.
    pub fn warn(&self, text: &str) {
        err_tagged("warning:", "33", text);
    }

    pub fn progress(&self, len: u64, what: &str) -> ProgressBar {
        self.bar(
            len,
            "{spinner} {msg:10} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
            what,
        )
    }

    /// A download's bar, in bytes (its length set once the server says it).
    pub fn download(&self, what: &str) -> ProgressBar {
        let template = "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}";
        self.bar(0, template, what)
    }

    fn bar(&self, len: u64, template: &'static str, what: &str) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(Some(len), self.draw_target());
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    }

    pub fn spinner(&self, what: &str) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(None, self.draw_target());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("static template"),
        );
        bar.set_message(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    }

    fn draw_target(&self) -> ProgressDrawTarget {
        if self.quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        }
    }
}

/// A line on stderr. A closed or broken stderr (`2>&-`, a log reader that went away) must
/// not panic the way `eprintln!` does: the line is lost, the command goes on.
fn err_line(text: &str) {
    err_tagged("", "", text);
}

/// A line on stderr starting with `tag`, coloured with the SGR code `sgr` when colour is
/// on. The tag is ours; the rest is neutralised by [`printable`] as any other text.
fn err_tagged(tag: &str, sgr: &str, text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = if tag.is_empty() {
        writeln!(err, "{}", printable(text))
    } else if color() {
        writeln!(err, "\x1b[{sgr}m{tag}\x1b[0m {}", printable(text))
    } else {
        writeln!(err, "{tag} {}", printable(text))
    };
}

/// `--color`: auto colours stderr when it is a terminal and `NO_COLOR` is unset
/// (<https://no-color.org>).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

static COLOR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn color() -> bool {
    COLOR.load(std::sync::atomic::Ordering::Relaxed)
}

impl ColorWhen {
    /// `--color` from the raw arguments (before clap parses them, so its own help and errors
    /// follow it too), else auto.
    pub fn from_args(args: &[String]) -> ColorWhen {
        let mut it = args.iter().take_while(|a| *a != "--");
        let mut when = None;
        while let Some(a) = it.next() {
            let value = match a.strip_prefix("--color") {
                Some("") => it.next().map(String::as_str),
                Some(v) => v.strip_prefix('='),
                None => continue,
            };
            when = match value {
                Some("always") => Some(ColorWhen::Always),
                Some("never") => Some(ColorWhen::Never),
                _ => Some(ColorWhen::Auto),
            };
        }
        when.unwrap_or(ColorWhen::Auto)
    }

    /// Whether stderr gets colour, and remembers it for the error and warning lines.
    pub fn apply(self) -> bool {
        let on = match self {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::io::stderr().is_terminal()
            }
        };
        COLOR.store(on, std::sync::atomic::Ordering::Relaxed);
        on
    }
}

/// Logs (tracing) on stderr: off by default; `-v` shows rag's own steps, `-vv` adds the
/// engines' (llama.cpp, LanceDB), `-vvv` everything. `RAG_LOG` overrides with a filter such
/// as `debug` or `rag=debug,lance=info`.
pub fn init_logs(verbose: u8, filter: Option<&str>) -> anyhow::Result<()> {
    use tracing_subscriber::filter::Targets;
    let filter: Targets = match filter {
        Some(f) => f.parse().map_err(|e| {
            crate::exit::ExitError::usage(format!(
                "RAG_LOG={f:?} is not a log filter ({e}); use a level (error, warn, info, debug, trace) or targets such as rag=debug,lance=info"
            ))
        })?,
        None => match verbose {
            0 => return Ok(()),
            1 => "rag=info".parse()?,
            2 => "rag=debug,llama_cpp_2=info,lance=info,lancedb=info".parse()?,
            _ => "trace".parse()?,
        },
    };
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(color())
        .with_target(true);
    // A second init (tests call run twice in one process) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(filter)
        .try_init();
    Ok(())
}

/// `text` without terminal control characters: documents are written by others, and an
/// escape sequence in one (ESC, CSI, OSC ...) must not reach the terminal through a search
/// hit, an answer or a warning, where it could recolour, retitle or rewrite the screen.
/// Control characters other than newline and tab become their visible Unicode symbols
/// (ESC is shown as ␛); JSON output is unchanged, since serde_json already escapes C0.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(bad) {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| match c {
            c if !bad(c) => c,
            '\u{7f}' => '\u{2421}',
            c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'),
            _ => '\u{fffd}',
        })
        .collect::<String>()
        .into()
}

/// The last word of a failed command: the whole error chain on one line.
pub fn error(err: &anyhow::Error) {
    err_tagged("rag: error:", "1;31", &format!("{err:#}"));
    if crate::exit::is_disk_full(err) {
        err_line(
            "rag: the disk is full (or a file size or quota limit was reached): free space on the \
             disk that holds the index and run the command again; the index keeps its last \
             complete version, and an ingest goes on where this one stopped",
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(super::printable("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            super::printable("a\x1b[31mred\x1b]0;title\x07"),
            "a\u{241b}[31mred\u{241b}]0;title\u{2407}"
        );
        assert_eq!(
            super::printable("\r\u{7f}\u{9b}x"),
            "\u{240d}\u{2421}\u{fffd}x"
        );
    }
}
