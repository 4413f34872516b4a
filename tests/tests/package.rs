//! The Debian package installs as an operator would install it, and
//! everything in it works from where it lands:
//! - `dpkg -i` of the .deb that `cargo xtask package` built (`LB_DEB`, which
//!   `cargo xtask test` sets), every file at its place, the config a conffile;
//! - `/usr/bin/lb --version`, `lb check-config` on /etc/lb/lb.toml and on its commented
//!   examples uncommented;
//! - the installed `lb` finds /usr/lib/lb/lb-xdp with no LB_XDP_OBJECT: `lb load` attaches
//!   it to `lo` of a namespace made here (generic mode, own pin directory), then unloads;
//! - the man pages render, the bash completion completes subcommands, and
//!   `systemd-analyze verify` accepts the unit (starting it needs a running systemd);
//! - an edit of /etc/lb/lb.toml survives installing the package again;
//! - `dpkg --purge` removes everything (a guard purges also when an assertion fails).
//!
//! Runs as root and changes the machine's package set: it refuses to run when an `lb`
//! package is already installed rather than replace the operator's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `cmd` and returns its output; panics when it cannot start.
fn out(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

/// Runs `cmd`, asserts success, returns stdout + stderr as text.
fn ok(cmd: &mut Command) -> String {
    let o = out(cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{cmd:?} failed ({}):\n{text}", o.status);
    text
}

fn installed() -> bool {
    let o = out(Command::new("dpkg-query").args(["-W", "-f=${Status}", "lb"]));
    String::from_utf8_lossy(&o.stdout).contains("ok installed")
}

/// Purges the package when dropped, so a failed assertion leaves the machine clean.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "lb"]).output();
    }
}

/// A network namespace and a pin directory, deleted when dropped.
struct Netns {
    name: String,
    pin_dir: PathBuf,
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.name))
            .args(["/usr/bin/lb", "unload", "--iface", "lo", "--pin-dir"])
            .arg(&self.pin_dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.pin_dir);
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .output();
    }
}

/// Every file the package must install (man pages are gzipped by the packaging).
const FILES: &[&str] = &[
    "/usr/bin/lb",
    "/usr/lib/lb/lb-xdp",
    "/usr/lib/lb/lb-decap",
    "/etc/lb/lb.toml",
    "/usr/lib/systemd/system/lb.service",
    "/usr/share/bash-completion/completions/lb",
    "/usr/share/zsh/vendor-completions/_lb",
    "/usr/share/fish/vendor_completions.d/lb.fish",
    "/usr/share/man/man1/lb.1.gz",
    "/usr/share/man/man1/lb-run.1.gz",
    "/usr/share/man/man1/lb-check-config.1.gz",
    "/usr/share/man/man1/lb-load.1.gz",
    "/usr/share/man/man1/lb-backend-maintenance.1.gz",
    "/usr/share/doc/lb/copyright",
    "/usr/share/doc/lb/README.md",
    "/usr/share/doc/lb/examples/example.toml",
];

/// The default configuration with its commented examples uncommented: `# key = ...` and
/// `# [table]` lines lose their `# `; prose comments stay comments.
fn uncommented(text: &str) -> String {
    text.lines()
        .map(|line| {
            let Some(rest) = line.strip_prefix("# ") else {
                return line.to_string();
            };
            let key = rest.split(" = ").next().unwrap_or("");
            let is_key = rest.contains(" = ")
                && !key.is_empty()
                && key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            if rest.starts_with('[') || is_key {
                rest.to_string()
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn check_files() {
    let listed = ok(Command::new("dpkg").args(["-L", "lb"]));
    for file in FILES {
        assert!(
            listed.lines().any(|l| l == *file),
            "dpkg -L lb does not list {file}:\n{listed}"
        );
        assert!(Path::new(file).is_file(), "{file} is not installed");
    }
    let conffiles = ok(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "lb"]));
    assert!(
        conffiles.contains("/etc/lb/lb.toml"),
        "/etc/lb/lb.toml is not a conffile: {conffiles}"
    );
    let depends = ok(Command::new("dpkg-query").args(["-W", "-f=${Depends}", "lb"]));
    assert!(depends.contains("libc6"), "Depends: {depends}");
    // The systemd fragments: the unit is known to systemd after an install or upgrade, a
    // running daemon hands over to the new binary after an upgrade (a reload, not the
    // generated restart), a removal stops it. tests/systemd_unit.rs runs them under systemd.
    let postinst = std::fs::read_to_string("/var/lib/dpkg/info/lb.postinst").unwrap_or_default();
    assert!(
        postinst.contains("daemon-reload")
            && postinst.contains("deb-systemd-invoke reload lb.service"),
        "postinst:\n{postinst}"
    );
    // A restart only as the fallback of a failed hand-over, never before it.
    let reload = postinst.find("reload lb.service").unwrap_or(usize::MAX);
    let restart = postinst.find("restart lb.service").unwrap_or(usize::MAX);
    assert!(
        restart > reload,
        "postinst restarts instead of handing over:\n{postinst}"
    );
    let prerm = std::fs::read_to_string("/var/lib/dpkg/info/lb.prerm").unwrap_or_default();
    assert!(prerm.contains("stop lb.service"), "prerm:\n{prerm}");
    let object = std::fs::read("/usr/lib/lb/lb-xdp").expect("the XDP object is readable");
    assert!(
        object.starts_with(b"\x7fELF"),
        "/usr/lib/lb/lb-xdp is no ELF object"
    );
}

fn check_binary_and_config() {
    let version = ok(Command::new("/usr/bin/lb").arg("--version"));
    assert_eq!(
        version.trim(),
        format!("lb {}", env!("CARGO_PKG_VERSION")),
        "lb --version"
    );
    let checked = ok(Command::new("/usr/bin/lb").args(["check-config", "/etc/lb/lb.toml"]));
    assert!(checked.contains("/etc/lb/lb.toml: ok"), "{checked}");
    let text = std::fs::read_to_string("/etc/lb/lb.toml").expect("config readable");
    let examples = uncommented(&text);
    assert!(
        examples.contains("\n[[vservice]]") && examples.contains("kind = \"http\""),
        "the default config's examples were not uncommented:\n{examples}"
    );
    let path = std::env::temp_dir().join(format!("lb-package-{}.toml", std::process::id()));
    std::fs::write(&path, examples).expect("write");
    let o = out(Command::new("/usr/bin/lb").arg("check-config").arg(&path));
    let _ = std::fs::remove_file(&path);
    let said =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "the commented examples are not valid:\n{said}"
    );
    assert!(
        said.contains("ok (2 vServices, 2 Backend Services)"),
        "{said}"
    );
}

/// The installed `lb`, without LB_XDP_OBJECT, loads /usr/lib/lb/lb-xdp onto `lo` of a
/// namespace of its own, then unloads it.
fn check_object_is_found() {
    let ns = Netns {
        name: format!("lbpkg{}", std::process::id()),
        pin_dir: PathBuf::from(format!("/sys/fs/bpf/lb-package-{}", std::process::id())),
    };
    ok(Command::new("ip").args(["netns", "add", &ns.name]));
    ok(Command::new("ip").args(["-n", &ns.name, "link", "set", "lo", "up"]));
    let lb = |args: &[&str]| {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", ns.name))
            .arg("/usr/bin/lb")
            .args(args)
            .arg("--pin-dir")
            .arg(&ns.pin_dir)
            .env_remove("LB_XDP_OBJECT");
        ok(&mut cmd)
    };
    let loaded = lb(&[
        "load",
        "--config",
        "/etc/lb/lb.toml",
        "--iface",
        "lo",
        "--mode",
        "skb",
    ]);
    assert!(loaded.contains("attached"), "{loaded}");
    assert!(
        ns.pin_dir.join("prog").exists(),
        "no program pinned: {loaded}"
    );
    let status = lb(&["status"]);
    assert!(status.contains("XDP data path: attached to lo"), "{status}");
    let unloaded = lb(&["unload", "--iface", "lo"]);
    assert!(unloaded.contains("program unloaded"), "{unloaded}");
}

fn check_pages_and_completions() {
    // `man -l` renders the page as `man lb-run` would show it.
    let page = ok(Command::new("man")
        .args(["-l", "/usr/share/man/man1/lb-run.1.gz"])
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat"));
    for text in ["lb-run", "--config", "SIGHUP", "--upgrade"] {
        assert!(page.contains(text), "man lb-run lacks {text}:\n{page}");
    }
    let index = ok(Command::new("man")
        .args(["-l", "/usr/share/man/man1/lb.1.gz"])
        .env("MANWIDTH", "100"));
    assert!(index.contains("lb-check-config(1)"), "{index}");
    // The bash completion completes subcommands, as a shell would on `lb ch<TAB>`.
    let script = "source /usr/share/bash-completion/completions/lb; \
                  COMP_WORDS=(lb ch); COMP_CWORD=1; _lb lb ch lb; echo \"${COMPREPLY[*]}\"";
    let completed = ok(Command::new("bash").args(["-c", script]));
    assert_eq!(
        completed.trim(),
        "check-config",
        "bash completion of `lb ch`"
    );
    let script = "source /usr/share/bash-completion/completions/lb; \
                  COMP_WORDS=(lb run --up); COMP_CWORD=2; _lb lb --up run; echo \"${COMPREPLY[*]}\"";
    let completed = ok(Command::new("bash").args(["-c", script]));
    assert_eq!(
        completed.trim(),
        "--upgrade",
        "bash completion of `lb run --up`"
    );
    let zsh = std::fs::read_to_string("/usr/share/zsh/vendor-completions/_lb").expect("zsh");
    assert!(zsh.starts_with("#compdef lb"), "{zsh}");
    let fish =
        std::fs::read_to_string("/usr/share/fish/vendor_completions.d/lb.fish").expect("fish");
    assert!(fish.contains("check-config"), "{fish}");
}

fn check_unit() {
    let unit = std::fs::read_to_string("/usr/lib/systemd/system/lb.service").expect("unit");
    for line in [
        "Type=notify",
        "NotifyAccess=all",
        "Environment=\"LB_RUN_ARGS=--config /etc/lb/lb.toml\"",
        "ExecStart=/usr/bin/lb run $LB_RUN_ARGS",
        "KillMode=mixed",
        "RuntimeDirectory=lb",
        "RuntimeDirectoryPreserve=yes",
        "ReadWritePaths=/etc/lb -/sys/fs/bpf",
    ] {
        assert!(unit.lines().any(|l| l == line), "lb.service lacks {line}");
    }
    // Checks the syntax, that ExecStart's binary exists and that the Documentation= man
    // pages are installed; an empty answer means no complaint.
    let verified =
        ok(Command::new("systemd-analyze").args(["verify", "/usr/lib/systemd/system/lb.service"]));
    assert!(
        !verified.contains("lb.service"),
        "systemd-analyze verify complains:\n{verified}"
    );
}

/// The package installs, works from where it lands, and purges clean.
#[test]
fn the_debian_package_installs_works_and_purges() {
    let deb = std::env::var("LB_DEB").unwrap_or_else(|_| {
        panic!(
            "LB_DEB is not set: `cargo xtask test` builds the package and sets it; by hand, \
             run `cargo xtask package` and set LB_DEB to the .deb it printed"
        )
    });
    assert!(Path::new(&deb).is_file(), "LB_DEB={deb} is not a file");
    assert!(
        !installed(),
        "an lb package is installed on this machine: this test installs and purges its own, \
         so purge that one first (dpkg --purge lb)"
    );
    let guard = Installed;
    ok(Command::new("dpkg").arg("-i").arg(&deb));
    check_files();
    check_binary_and_config();
    check_object_is_found();
    check_pages_and_completions();
    check_unit();
    // An operator's edit of the conffile survives installing the package again.
    let edited = std::fs::read_to_string("/etc/lb/lb.toml").expect("config") + "# edited\n";
    std::fs::write("/etc/lb/lb.toml", &edited).expect("edit the config");
    ok(Command::new("dpkg").arg("-i").arg(&deb));
    assert_eq!(
        std::fs::read_to_string("/etc/lb/lb.toml").expect("config"),
        edited,
        "reinstalling replaced the edited /etc/lb/lb.toml"
    );
    ok(Command::new("dpkg").args(["--purge", "lb"]));
    std::mem::forget(guard);
    assert!(!installed(), "lb is still installed after dpkg --purge");
    for file in FILES {
        assert!(
            !Path::new(file).exists(),
            "{file} is left after dpkg --purge"
        );
    }
    assert!(
        !Path::new("/etc/lb").exists(),
        "/etc/lb is left after dpkg --purge"
    );
}
