//! Variables that look like settings but that nothing reads. envy takes the fields a group asks for
//! and ignores every other variable, so `CLIPFN_BATCH_SIZ=64` would leave the batch at its default
//! without a word; start-up names each such variable instead, with the known one closest to it.
//!
//! Known are the settings (`variables`) and the variables the command line reads (clap's `env`,
//! such as `clipfn backfill --chunk`'s `CLIPFN_BACKFILL_CHUNK`), which the caller passes in. Left
//! out on purpose are the variables of clipfn's own tooling ([`TOOLING`], [`TOOLING_FAMILIES`]):
//! tools/setup.sh records them in `.cache/clipfn.env` beside `ORT_DYLIB_PATH`, and the tests,
//! benches and scripts read them, never the binary. They share the prefix, so a developer who
//! exports that file (as tools/README.md shows) hands them to every `clipfn` started from that
//! shell; reporting them would bury a real misspelling under a dozen lines. A test of the binary
//! (src/main.rs) reads every `CLIPFN_*` name the repository mentions and fails on one that is
//! neither read nor listed here, so a new tooling variable is a decision made here.

use std::fmt;

use super::variables;

/// The prefix of clipfn's variables; envy strips it (as often as it repeats) before it matches a
/// field, in any case.
const PREFIX: &str = "CLIPFN_";

/// `CLIPFN_*` variables that clipfn's scripts and test harness read (tools/, infra/, tests/), never
/// the binary.
pub const TOOLING: &[&str] = &[
    // Written by tools/setup.sh into .cache/clipfn.env.
    "CLIPFN_FAKE_GCS_BIN",
    "CLIPFN_HADOLINT_BIN",
    "CLIPFN_K6_BIN",
    "CLIPFN_MOTO_SERVER_BIN",
    "CLIPFN_PHOTOS_DIR",
    "CLIPFN_PILLOW_IMAGES_DIR",
    "CLIPFN_PYTHON",
    // Options of the scripts in tools/ and infra/.
    "CLIPFN_BIN",
    "CLIPFN_DEMO_MODEL",
    "CLIPFN_DEMO_PHOTOS",
    "CLIPFN_DOCKER",
    "CLIPFN_GCS_CREDENTIALS",
    "CLIPFN_GCS_PORT",
    "CLIPFN_GCS_URL",
    "CLIPFN_IMAGES_KEEP",
    "CLIPFN_IMAGES_ONLY",
    "CLIPFN_INFRA_SMOKE",
    "CLIPFN_PHOTOS_FILE",
    "CLIPFN_PIP",
    "CLIPFN_PORT",
    "CLIPFN_READY_TIMEOUT",
    "CLIPFN_SHELLCHECK_BIN",
    "CLIPFN_STACK_DIR",
    "CLIPFN_STACK_PHOTOS",
    "CLIPFN_URL",
];

/// Families of tooling variables, by prefix: the test models and folders tools/setup.sh records
/// (`CLIPFN_TEST_MODEL`, ...) and the benches' options (`CLIPFN_BENCH_SECONDS`, ...).
pub const TOOLING_FAMILIES: &[&str] = &["CLIPFN_TEST_", "CLIPFN_BENCH_"];

/// A `CLIPFN_*` variable that is set and that nothing reads, with the known name closest to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    pub name: String,
    /// The known variable whose name is closest (edit distance, case aside).
    pub closest: String,
    /// Whether `closest` is near enough to be what was meant.
    pub likely: bool,
}

impl fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { name, closest, likely } = self;
        if *likely {
            write!(f, "{name} is set, but no setting reads it: did you mean {closest}?")
        } else {
            write!(
                f,
                "{name} is set, but no setting reads it (the closest is {closest}; every setting: README.md, \
                 Configuration)"
            )
        }
    }
}

/// The variables among `names` that look like clipfn's (`CLIPFN_`, in any case) and that neither
/// the settings, nor `also_read` (the command line's variables), nor clipfn's tooling read; sorted.
pub fn unknown_variables<S: AsRef<str>>(
    names: impl IntoIterator<Item = S>,
    also_read: &[&str],
) -> Vec<UnknownVariable> {
    let mut unknown: Vec<UnknownVariable> = names
        .into_iter()
        .filter(|name| {
            let name = name.as_ref();
            looks_like_ours(name) && !read_by_settings(name) && !also_read.contains(&name) && !is_tooling(name)
        })
        .map(|name| closest(name.as_ref(), also_read))
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown
}

fn looks_like_ours(name: &str) -> bool {
    name.get(..PREFIX.len()).is_some_and(|prefix| prefix.eq_ignore_ascii_case(PREFIX))
}

/// Whether envy reads `name` for a setting: the exact prefix, then a field's name in any case.
fn read_by_settings(name: &str) -> bool {
    if !name.starts_with(PREFIX) {
        return false;
    }
    let field = name.trim_start_matches(PREFIX).to_lowercase();
    variables().any(|variable| variable[PREFIX.len()..].to_lowercase() == field)
}

fn is_tooling(name: &str) -> bool {
    TOOLING.contains(&name) || TOOLING_FAMILIES.iter().any(|family| name.starts_with(family))
}

fn closest(name: &str, also_read: &[&str]) -> UnknownVariable {
    let upper = name.to_ascii_uppercase();
    let suffix = &upper[PREFIX.len()..];
    let settings = variables().map(|variable| -> &str { variable });
    let (distance, closest) = settings
        .chain(also_read.iter().copied())
        .map(|known| (strsim::damerau_levenshtein(suffix, known.get(PREFIX.len()..).unwrap_or(known)), known))
        .min_by_key(|(distance, _)| *distance)
        .expect("there are settings");
    // A slip of a key (a letter left out, doubled, swapped), or at most one letter in three.
    let likely = distance <= (suffix.chars().count() / 3).max(1);
    UnknownVariable { name: name.to_string(), closest: closest.to_string(), likely }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(names: &[&str]) -> Vec<UnknownVariable> {
        unknown_variables(names, &["CLIPFN_BACKFILL_CHUNK"])
    }

    #[test]
    fn a_misspelt_setting_is_named_with_the_closest_one() {
        let found = unknown(&["CLIPFN_BATCH_SIZ", "PATH", "CLIPFN_MODEL", "CLIPFN_BTACH_WAIT_MS", "clipfn_store"]);
        let pairs: Vec<(&str, &str, bool)> =
            found.iter().map(|u| (u.name.as_str(), u.closest.as_str(), u.likely)).collect();
        assert_eq!(
            pairs,
            [
                ("CLIPFN_BATCH_SIZ", "CLIPFN_BATCH_SIZE", true),
                ("CLIPFN_BTACH_WAIT_MS", "CLIPFN_BATCH_WAIT_MS", true),
                // Names are case-sensitive, and envy reads only the exact prefix.
                ("clipfn_store", "CLIPFN_STORE", true),
            ]
        );
        assert_eq!(
            found[0].to_string(),
            "CLIPFN_BATCH_SIZ is set, but no setting reads it: did you mean CLIPFN_BATCH_SIZE?"
        );
        // The command line's variables are candidates too.
        assert_eq!(unknown(&["CLIPFN_BACKFILL_CHUNKS"])[0].closest, "CLIPFN_BACKFILL_CHUNK");
        // A name like no setting still gets the closest, said as such.
        let far = &unknown(&["CLIPFN_VERBOSE"])[0];
        assert!(!far.likely && far.to_string().contains("the closest is"), "{far}");
    }

    #[test]
    fn every_real_variable_is_not_reported() {
        let settings: Vec<&str> = variables().collect();
        assert!(settings.contains(&"CLIPFN_BATCH_WAIT_MS") && settings.contains(&"CLIPFN_LOG_FORMAT"));
        assert_eq!(unknown(&settings), [], "a setting is reported");
        assert_eq!(unknown(&["CLIPFN_BACKFILL_CHUNK"]), [], "the command line's variable is reported");
        assert_eq!(unknown(TOOLING), [], "a tooling variable is reported");
        assert_eq!(unknown(&["CLIPFN_TEST_MODEL", "CLIPFN_BENCH_SECONDS"]), []);
        // envy reads the part after the prefix in any case, so these are read, not unknown.
        assert_eq!(unknown(&["CLIPFN_Batch_Size", "CLIPFN_CLIPFN_MODEL"]), []);
        // Without the command line's list, its variable is unknown.
        assert_eq!(unknown_variables(["CLIPFN_BACKFILL_CHUNK"], &[]).len(), 1);
    }
}
