//! The error of a name or value given as text (an option's value, a config name): which
//! kind of thing, what was given, what would have been accepted. Every `FromStr` of the
//! crate returns it, so the message has one shape: "unknown metric `nope` (one of ...)".

/// A name or value that is not one of those accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// `unknown {what} `{given}` (one of {choices})`.
    #[error("unknown {what} `{given}` (one of {choices})")]
    Unknown {
        what: &'static str,
        given: String,
        choices: String,
    },
    /// `` `{given}` is not {what} ({choices}) ``.
    #[error("`{given}` is not {what} ({choices})")]
    NotA {
        what: &'static str,
        given: String,
        choices: &'static str,
    },
    /// `` unknown {what} `{given}` in `{within}` ({choices}) ``: a part of a value, such as
    /// the unit of a size.
    #[error("unknown {what} `{given}` in `{within}` ({choices})")]
    UnknownIn {
        what: &'static str,
        given: String,
        within: String,
        choices: &'static str,
    },
}

impl ParseError {
    /// `given` is no `what`; `choices` lists the names accepted.
    pub fn unknown(what: &'static str, given: &str, choices: &[&str]) -> ParseError {
        ParseError::Unknown {
            what,
            given: given.to_string(),
            choices: choices.join(", "),
        }
    }

    /// `given` is not `what` (e.g. "a device"); `choices` says what is.
    pub fn not_a(what: &'static str, given: &str, choices: &'static str) -> ParseError {
        ParseError::NotA {
            what,
            given: given.to_string(),
            choices,
        }
    }
}
