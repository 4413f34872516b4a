//! `lb --help`, the manual pages and the documentation agree.
//!
//! The clap command of `lb` is [`lb::command_line::command`]: `lb --help` prints it, and the
//! manual pages come from the same command (`lb man --dir DIR` writes them with clap_mangen;
//! `cargo xtask package` runs it for the Debian package), as do the shell completions. So
//! checking the documentation against that command checks it against the pages too.
//!
//! README.md and docs/*.md are read as Markdown: every `lb ...` written in a code span or a
//! fenced code block (a shell line may start with a prompt, `sudo`, `VAR=value` or `ip netns
//! exec NS`) is followed through the subcommands it names, and each subcommand or `--flag`
//! that clap does not know (a typo, or something removed) is reported with its file and
//! line. Upper-case words (`NAME`), `<value>` and `...` are placeholders; `a|b` names
//! alternatives, each checked. `cargo xtask ...` lines are checked the same way against the
//! `xtask` command, read from xtask/src/main.rs. The other direction: every visible
//! top-level subcommand of `lb` is written somewhere in the documentation.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Command;

/// The repository's root (the parent of lb-userspace/).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("lb-userspace has a parent")
        .to_path_buf()
}

/// README.md and docs/*.md (sorted), with their text.
fn documents() -> Vec<(String, String)> {
    let root = root();
    let mut paths = vec![root.join("README.md")];
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        let mut docs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        paths.extend(docs);
    }
    paths
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            let name = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
            Some((name, text))
        })
        .collect()
}

/// The code of a Markdown text, as (1-based line, text): each line of a fenced block (lines
/// ending in `\` joined to the next) and each inline code span. Blocks of data formats
/// (TOML, JSON, YAML, Rust...) are left out.
fn code(markdown: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<(String, bool)> = None; // (the fence's marker, whether it is read)
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some((marker, read)) = &fence {
            if trimmed.starts_with(marker.as_str())
                && trimmed.trim_start_matches(['`', '~']).trim().is_empty()
            {
                if let Some(p) = pending.take() {
                    out.push(p);
                }
                fence = None;
                continue;
            }
            if !*read {
                continue;
            }
            let (start, mut text) = pending.take().unwrap_or((n, String::new()));
            text.push_str(line.trim());
            if let Some(joined) = text.strip_suffix('\\') {
                pending = Some((start, format!("{} ", joined.trim_end())));
            } else {
                out.push((start, text));
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            let info = trimmed[marker.len()..].trim().to_ascii_lowercase();
            let data = [
                "toml", "json", "yaml", "yml", "ini", "csv", "rust", "rs", "diff", "conf",
            ];
            let read = !data
                .iter()
                .any(|d| info.split([' ', ',', '{']).next() == Some(*d));
            fence = Some((marker, read));
            continue;
        }
        out.extend(spans(line).into_iter().map(|s| (n, s)));
    }
    out
}

/// The inline code spans of one line: text between matching runs of backticks.
fn spans(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let start = i + run;
        let mut j = start;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let close = bytes[j..].iter().take_while(|b| **b == b'`').count();
                if close == run {
                    end = Some(j);
                    break;
                }
                j += close;
            } else {
                j += 1;
            }
        }
        match end {
            Some(e) => {
                out.push(line[start..e].trim().to_string());
                i = e + run;
            }
            None => i = start,
        }
    }
    out
}

/// Shell-like words: whitespace separates them, quotes keep theirs together (and go), and
/// `\|` (a pipe escaped in a Markdown table) is `|`.
fn words(text: &str) -> Vec<String> {
    let text = text.replace("\\|", "|");
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut quoted = false;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                quoted = true;
            }
            None if c.is_whitespace() => {
                if !word.is_empty() || quoted {
                    out.push(std::mem::take(&mut word));
                }
                quoted = false;
            }
            None => word.push(c),
        }
    }
    if !word.is_empty() || quoted {
        out.push(word);
    }
    out
}

/// The words that follow each invocation of `program` (its name, or a binary's path to it
/// such as `target/debug/lb`) at the start of a shell command.
fn invocations(words: &[String], program: &[&str]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let n = program.len();
    for i in 0..words.len() {
        if i + n > words.len() {
            break;
        }
        if !names_program(&words[i], program[0])
            || words[i + 1..i + n]
                .iter()
                .zip(&program[1..])
                .any(|(w, p)| w != p)
        {
            continue;
        }
        if i == 0 || starts_a_command(&words[..i]) {
            out.push(words[i + n..].to_vec());
        }
    }
    out
}

/// Whether `word` runs `name`: the name itself, `./name`, or a path through a directory of
/// binaries (`/usr/bin/lb`, `target/release/lb`); not a directory like `/etc/lb`.
fn names_program(word: &str, name: &str) -> bool {
    word == name
        || ["./", "bin/", "debug/", "release/"]
            .iter()
            .any(|dir| word.strip_suffix(name).is_some_and(|p| p.ends_with(dir)))
}

/// Whether the word after `before` starts a command: after a prompt, an operator, `sudo`,
/// an environment assignment, or `ip netns exec NS`.
fn starts_a_command(before: &[String]) -> bool {
    let Some(prev) = before.last() else {
        return true;
    };
    let p = prev.as_str();
    let env = p.contains('=')
        && p.split('=').next().is_some_and(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        });
    let prompt =
        p == "$" || p == "#" || p == "%" || p.ends_with("$") || p.ends_with('#') && p.contains('@');
    let netns = before.len() >= 3
        && before[before.len() - 3] == "netns"
        && before[before.len() - 2] == "exec";
    env || prompt
        || netns
        || [
            "sudo", "&&", "||", ";", "|", "(", "$(", "exec", "time", "nohup", "then", "do",
            "watch", "-E",
        ]
        .contains(&p)
}

/// Ends the command's words: a shell operator, a redirection or a comment.
fn ends_command(word: &str) -> bool {
    ["|", "||", "&&", ";", "&", ">", ">>", "<", "2>&1", "2>", ")"].contains(&word)
        || word.starts_with('#')
        || word.starts_with('>')
        || word.starts_with("2>")
        || word.ends_with(';')
}

/// A word that stands for a value: `NAME`, `<name>`, `{a,b}`, `...`.
fn placeholder(word: &str) -> bool {
    let w = word.trim_matches(['[', ']', '(', ')', ',', '.', ':']);
    w.is_empty()
        || word.contains("...")
        || word.contains('…')
        || word.starts_with(['<', '{', '$'])
        || (w.chars().any(|c| c.is_ascii_uppercase())
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "_-|".contains(c)))
}

/// What a command knows of its flags: long names, short names, and for each whether it
/// takes a value.
struct Flags {
    long: Vec<(String, bool)>,
    short: Vec<(char, bool)>,
}

/// The flags of a clap command (after `Command::build`, with globals and --help).
fn clap_flags(cmd: &Command) -> Flags {
    let mut flags = Flags {
        long: Vec::new(),
        short: Vec::new(),
    };
    for arg in cmd.get_arguments() {
        let takes = arg.get_action().takes_values();
        for long in arg
            .get_long()
            .into_iter()
            .chain(arg.get_all_aliases().unwrap_or_default())
        {
            flags.long.push((long.to_string(), takes));
        }
        for short in arg
            .get_short()
            .into_iter()
            .chain(arg.get_all_short_aliases().unwrap_or_default())
        {
            flags.short.push((short, takes));
        }
    }
    flags
}

/// A command line interface as the check walks it: subcommands by name, flags per command.
trait Cli {
    /// The subcommand `name` of this one, if it has it.
    fn sub(&self, name: &str) -> Option<&Self>;
    /// Whether this command takes subcommands (so the next plain word must be one).
    fn has_subs(&self) -> bool;
    fn flags(&self) -> Flags;
    /// Whether the words after this command go to another program (`cargo xtask test`).
    fn passes_words_on(&self) -> bool {
        false
    }
}

impl Cli for Command {
    fn sub(&self, name: &str) -> Option<&Command> {
        self.find_subcommand(name)
    }
    fn has_subs(&self) -> bool {
        self.has_subcommands()
    }
    fn flags(&self) -> Flags {
        clap_flags(self)
    }
}

/// Follows `words` (what comes after the program's name) through `top`'s subcommands and
/// returns what does not exist: unknown subcommands and flags. `shown` is the program as
/// written in messages; `path` collects the subcommands named (first level).
fn check<C: Cli>(
    top: &C,
    shown: &str,
    words: &[String],
    first: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut cmd = top;
    let mut path = shown.to_string();
    let mut descending = true;
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        i += 1;
        if ends_command(word) {
            break;
        }
        if cmd.passes_words_on() {
            break;
        }
        let bare = word
            .trim_start_matches(['[', '('])
            .trim_end_matches([']', ')', ',']);
        if bare == "--" {
            break;
        }
        if bare.starts_with('-')
            && bare.len() > 1
            && !bare[1..].starts_with(|c: char| c.is_ascii_digit())
        {
            let flags = cmd.flags();
            for alt in bare.split('|').filter(|a| !a.is_empty()) {
                if let Some(long) = alt.strip_prefix("--") {
                    let (name, inline_value) = match long.split_once('=') {
                        Some((n, _)) => (n, true),
                        None => (long, false),
                    };
                    match flags.long.iter().find(|(l, _)| l == name) {
                        Some((_, takes)) => {
                            if *takes
                                && !inline_value
                                && alt == bare
                                && i < words.len()
                                && !words[i].starts_with('-')
                            {
                                i += 1; // its value
                            }
                        }
                        None => problems.push(format!("`{path}` has no flag --{name}")),
                    }
                } else if let Some(short) = alt.strip_prefix('-').and_then(|s| s.chars().next()) {
                    match flags.short.iter().find(|(s, _)| *s == short) {
                        Some((_, takes)) => {
                            if *takes
                                && alt.len() == 2
                                && alt == bare
                                && i < words.len()
                                && !words[i].starts_with('-')
                            {
                                i += 1;
                            }
                        }
                        None => problems.push(format!("`{path}` has no flag -{short}")),
                    }
                }
            }
            continue;
        }
        if !descending || !cmd.has_subs() {
            continue; // a positional value
        }
        if placeholder(word) {
            descending = false;
            continue;
        }
        let alternatives: Vec<&str> = bare.split('|').filter(|a| !a.is_empty()).collect();
        let mut next = None;
        for alt in &alternatives {
            match cmd.sub(alt) {
                Some(sub) => {
                    if path == shown {
                        first.insert(alt.to_string());
                    }
                    next = next.or(Some(sub));
                }
                None if placeholder(alt) => {}
                None => problems.push(format!("`{path}` has no subcommand `{alt}`")),
            }
        }
        match next {
            Some(sub) => {
                cmd = sub;
                path = format!("{path} {}", alternatives[0]);
            }
            None => descending = false,
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------------
// `cargo xtask`, read from xtask/src/main.rs (xtask is a binary crate of its own)

/// One subcommand of `cargo xtask`: its long flags, or none when its words go on to another
/// program (`cargo xtask test -- ...`).
struct XtaskSub(Option<Vec<String>>);

impl Cli for XtaskSub {
    fn sub(&self, _: &str) -> Option<&Self> {
        None
    }
    fn has_subs(&self) -> bool {
        false
    }
    fn flags(&self) -> Flags {
        let mut long: Vec<(String, bool)> = self
            .0
            .iter()
            .flatten()
            .map(|l| (l.clone(), false))
            .collect();
        long.push(("help".into(), false));
        Flags {
            long,
            short: vec![('h', false)],
        }
    }
    fn passes_words_on(&self) -> bool {
        self.0.is_none()
    }
}

/// The xtask command line: its subcommands (kebab-case) and their flags.
struct Xtask {
    subs: Vec<(String, XtaskSub)>,
}

/// Reads `enum Cmd` of xtask/src/main.rs: each variant is a kebab-case subcommand; each
/// field under `#[arg(long ...)]` a flag; a `trailing_var_arg` field passes words on.
fn xtask() -> Xtask {
    let text =
        std::fs::read_to_string(root().join("xtask/src/main.rs")).expect("xtask/src/main.rs");
    let body = text
        .split_once("enum Cmd {")
        .map(|(_, rest)| rest.split("\n}\n").next().unwrap_or(rest))
        .expect("xtask's `enum Cmd`");
    let mut subs: Vec<(String, XtaskSub)> = Vec::new();
    let mut attr = String::new();
    for line in body.lines() {
        let t = line.trim();
        if line.starts_with("    ")
            && !line.starts_with("     ")
            && t.starts_with(|c: char| c.is_ascii_uppercase())
        {
            let name: String = t
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            subs.push((kebab(&name), XtaskSub(Some(Vec::new()))));
            continue;
        }
        if t.starts_with("#[arg(") {
            attr = t.to_string();
            continue;
        }
        if let Some((field, _)) = t.split_once(':').filter(|_| !t.starts_with("//")) {
            let Some((_, XtaskSub(flags))) = subs.last_mut() else {
                continue;
            };
            if attr.contains("trailing_var_arg") {
                *flags = None;
            } else if attr.contains("long") {
                let explicit = attr
                    .split_once("long = \"")
                    .and_then(|(_, r)| r.split_once('"'))
                    .map(|(l, _)| l.to_string());
                if let Some(f) = flags.as_mut() {
                    f.push(explicit.unwrap_or_else(|| field.trim().replace('_', "-")));
                }
            }
            attr.clear();
        }
    }
    assert!(subs.len() > 3, "xtask's subcommands were not read");
    Xtask { subs }
}

fn kebab(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// [`check`] for `cargo xtask`: its first word must be a subcommand, then its flags known.
fn check_xtask(x: &Xtask, words: &[String]) -> Vec<String> {
    let Some(first) = words
        .first()
        .filter(|w| !ends_command(w) && !w.starts_with('-'))
    else {
        return Vec::new();
    };
    if placeholder(first) {
        return Vec::new();
    }
    let mut problems = Vec::new();
    let mut unused = BTreeSet::new();
    let alternatives: Vec<&str> = first.split('|').filter(|a| !a.is_empty()).collect();
    for alt in &alternatives {
        if !x.subs.iter().any(|(s, _)| s == alt) && !placeholder(alt) {
            problems.push(format!("`cargo xtask` has no subcommand `{alt}`"));
        }
    }
    if let Some((name, sub)) = x.subs.iter().find(|(s, _)| s == alternatives[0]) {
        problems.extend(check(
            sub,
            &format!("cargo xtask {name}"),
            &words[1..],
            &mut unused,
        ));
    }
    problems
}

// ---------------------------------------------------------------------------------------------

/// Every `lb` and `cargo xtask` invocation in the documentation, checked: the problems,
/// the top-level subcommands named, and how many `lb` invocations were read.
fn findings() -> (Vec<String>, BTreeSet<String>, usize) {
    let mut lb = lb::command_line::command();
    lb.build();
    let x = xtask();
    let mut problems = Vec::new();
    let mut named = BTreeSet::new();
    let mut read = 0;
    for (file, text) in documents() {
        for (line, code) in code(&text) {
            let words = words(&code);
            for rest in invocations(&words, &["lb"]) {
                read += 1;
                for p in check(&lb, "lb", &rest, &mut named) {
                    problems.push(format!("{file}:{line}: {p} (in `{code}`)"));
                }
            }
            for rest in invocations(&words, &["cargo", "xtask"]) {
                for p in check_xtask(&x, &rest) {
                    problems.push(format!("{file}:{line}: {p} (in `{code}`)"));
                }
            }
        }
    }
    problems.dedup();
    (problems, named, read)
}

#[test]
fn every_subcommand_and_flag_the_docs_write_exists() {
    let (problems, _, read) = findings();
    // The reader works on the documentation as written (README.md alone has dozens).
    assert!(
        read >= 20,
        "only {read} `lb` commands read in README.md and docs/*.md"
    );
    assert!(
        problems.is_empty(),
        "the documentation names what `lb --help` (and its man pages) or `cargo xtask --help` \
         do not know:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_top_level_subcommand_is_documented() {
    let (_, named, _) = findings();
    let mut lb = lb::command_line::command();
    lb.build();
    let missing: Vec<&str> = lb
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name())
        .filter(|name| !named.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "top-level subcommands of `lb` that README.md and docs/*.md never write as `lb NAME` \
         in code: {missing:?}"
    );
}

#[test]
fn the_reader_finds_commands_in_spans_blocks_and_tables() {
    let md = "Run `lb stats --csv` or `lb backend maintenance\\|backup NAME on\\|off`.\n\
              ```sh\n$ sudo LB_TOKEN=x lb --log-format json node drain \\\n  --timeout 5\n```\n\
              ```toml\nname = \"lb run --nope\"\n```\n\
              `journalctl -u lb -f` and `lb stat`; `cargo xtask bench l7` and `cargo xtask tset`\n";
    let mut lb = lb::command_line::command();
    lb.build();
    let x = xtask();
    let mut named = BTreeSet::new();
    let mut problems = Vec::new();
    for (line, code) in code(md) {
        let words = words(&code);
        for rest in invocations(&words, &["lb"]) {
            problems.extend(
                check(&lb, "lb", &rest, &mut named)
                    .into_iter()
                    .map(|p| format!("{line}: {p}")),
            );
        }
        for rest in invocations(&words, &["cargo", "xtask"]) {
            problems.extend(
                check_xtask(&x, &rest)
                    .into_iter()
                    .map(|p| format!("{line}: {p}")),
            );
        }
    }
    assert_eq!(
        problems,
        vec![
            "9: `lb` has no subcommand `stat`".to_string(),
            "9: `cargo xtask` has no subcommand `tset`".to_string(),
        ]
    );
    let expected: BTreeSet<String> = ["stats", "backend", "node"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(named, expected);
}

/// The README stays a front page (at most 10 KB) and the benchmarks page a page of today's
/// figures (at most 20 KB): details go to docs/, history stays in git.
#[test]
fn readme_and_benchmarks_page_stay_within_their_size() {
    for (file, limit) in [("README.md", 10 * 1024), ("docs/benchmarks.md", 20 * 1024)] {
        let len = std::fs::metadata(root().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .len();
        assert!(len <= limit, "{file} is {len} bytes, over {limit}");
    }
}
