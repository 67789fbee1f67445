//! Man pages and shell completions generated from a binary's own clap definition, so they
//! never drift from `--help`. Each binary calls [`generate_if_asked`] first thing in `main`:
//! with `BESSEMER_GENERATE` set to `man`, `bash`, `zsh` or `fish` in its environment it
//! prints that artefact on stdout and exits (the convention of clap_complete's `COMPLETE`
//! variable); otherwise it returns at once. `make man completions` (scripts/gen-clidoc.sh)
//! collects them.

use std::io::Write;

/// The environment variable that asks a binary for an artefact.
pub const ENV: &str = "BESSEMER_GENERATE";

/// Writes the artefact `kind` of `cmd` to `out`.
pub fn generate(kind: &str, mut cmd: clap::Command, out: &mut dyn Write) -> Result<(), String> {
    let name = cmd.get_name().to_string();
    match kind {
        "man" => clap_mangen::Man::new(cmd)
            .render(out)
            .map_err(|e| format!("cannot write the man page: {e}")),
        "bash" | "zsh" | "fish" => {
            let shell: clap_complete::Shell = kind.parse().expect("a shell clap_complete knows");
            clap_complete::generate(shell, &mut cmd, name, out);
            Ok(())
        }
        other => Err(format!("{ENV}={other}: expected man, bash, zsh or fish")),
    }
}

/// Prints the artefact asked for by `BESSEMER_GENERATE` and exits (status 0, or 2 with a
/// message for an unknown kind); returns when the variable is not set.
pub fn generate_if_asked(cmd: impl FnOnce() -> clap::Command) {
    let Some(kind) = std::env::var_os(ENV) else {
        return;
    };
    let kind = kind.to_string_lossy().into_owned();
    let mut out = std::io::stdout().lock();
    match generate(&kind, cmd(), &mut out).and_then(|()| out.flush().map_err(|e| e.to_string())) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> clap::Command {
        clap::Command::new("frob")
            .version("1.2.3")
            .about("Frobs things")
            .arg(
                clap::Arg::new("level")
                    .long("level")
                    .help("How hard to frob"),
            )
    }

    #[test]
    fn man_page_carries_the_help() {
        let mut v = Vec::new();
        generate("man", cmd(), &mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        assert!(s.starts_with(".ie"), "roff: {s}");
        assert!(s.contains(".TH frob 1") || s.contains(".TH frob"), "{s}");
        assert!(s.contains("How hard to frob"), "{s}");
        assert!(s.contains("1.2.3"), "{s}");
    }

    #[test]
    fn completions_name_the_options() {
        for sh in ["bash", "zsh", "fish"] {
            let mut v = Vec::new();
            generate(sh, cmd(), &mut v).unwrap();
            let s = String::from_utf8(v).unwrap();
            assert!(s.contains("level"), "{sh}: {s}");
        }
    }

    #[test]
    fn unknown_kind_is_refused_by_name() {
        let e = generate("powershell7", cmd(), &mut Vec::new()).unwrap_err();
        assert!(
            e.contains("powershell7") && e.contains("man, bash, zsh or fish"),
            "{e}"
        );
    }
}
