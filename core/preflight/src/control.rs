//! The control channel between two partners of a round: how the driving host learns the
//! serving host's rail addresses and how the two keep their tests apart, with no
//! coordinator.
//!
//! Every host listens on one TCP port for the whole sweep. For each of its driving steps
//! a host connects to its partner's port and sends [`Message::Hello`] naming the step
//! (its name, the round, the phase). The partner answers [`Message::Rails`] (its NICs in
//! rank order, each with the address its RoCE v2 GID carries) only when it has itself
//! reached that step as the serving side: a host still busy with an earlier round keeps
//! its next driver waiting instead of being measured twice at once. The driver runs its
//! tests, then sends [`Message::Done`], which ends the partner's step (the connection
//! closing ends it too: the driver is gone). The tests' queue pairs on the partner's
//! responder do not wait for it: each bandwidth test ends on its own side channel, at
//! once when it failed (the verbs plugin's abort). A hello the
//! schedule does not explain (a host not in the list, a round where the two are not
//! partners, the wrong side driving) is answered [`Message::Refused`] with why.
//!
//! One JSON object per line, at most [`MAX_LINE`] bytes; anything else is refused with
//! what was wrong. The messages carry only host names, NIC names and addresses (and the
//! job's [`Token`]). A sweep given a token (every host the same) answers only hellos that
//! carry it, compared in constant time ([`Token::admits`]): a host on the network that
//! lacks it is refused before its hello can begin, end or alter a step. Without a token a
//! stray client learns what `rocewatch env` would show, and can end a step early.

use serde::{Deserialize, Serialize};

use crate::rails::HostRails;
use crate::schedule::{Phase, Role, Schedule};

/// The longest line either side reads (a host of 64 rails fits many times over).
pub const MAX_LINE: usize = 64 * 1024;

/// The step a message is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepId {
    /// The driving host, as the host list spells it.
    pub from: String,
    pub round: usize,
    pub phase: Phase,
}

/// A secret every host of a sweep shares (`--token-file`, `ROCEWATCH_PREFLIGHT_TOKEN`),
/// said in each hello. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(String);

/// The longest token taken (a control line holds it many times over).
pub const MAX_TOKEN: usize = 1024;

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// `text` without the spaces and newline around it: at least one character, at most
    /// [`MAX_TOKEN`] bytes, one line.
    pub fn new(text: &str) -> Result<Token, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("the token is empty".into());
        }
        if t.len() > MAX_TOKEN {
            return Err(format!(
                "a token of {} bytes is over the limit of {MAX_TOKEN}",
                t.len()
            ));
        }
        if t.contains(['\n', '\r']) {
            return Err("the token is more than one line".into());
        }
        Ok(Token(t.to_string()))
    }

    /// Whether a hello carrying `said` may be answered by a host holding `mine`: the same
    /// token (compared in constant time over the longer of the two), or neither has one.
    pub fn admits(mine: Option<&Token>, said: Option<&Token>) -> bool {
        match (mine, said) {
            (None, None) => true,
            (Some(a), Some(b)) => same(a.0.as_bytes(), b.0.as_bytes()),
            _ => false,
        }
    }
}

/// `a == b`, in a time that depends only on their lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = a.len() ^ b.len();
    for i in 0..n {
        let (x, y) = (
            a.get(i).copied().unwrap_or(0),
            b.get(i).copied().unwrap_or(0),
        );
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// A driver's hello: the step it is about to run, and the sweep's token if it has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub from: String,
    pub round: usize,
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Token>,
}

impl Hello {
    pub fn new(step: StepId, token: Option<Token>) -> Hello {
        Hello {
            from: step.from,
            round: step.round,
            phase: step.phase,
            token,
        }
    }

    /// The step it names.
    pub fn step(&self) -> StepId {
        StepId {
            from: self.from.clone(),
            round: self.round,
            phase: self.phase,
        }
    }
}

/// One line of the control channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Driver → server: this step is about to run (a hello without a token is the line
    /// of a sweep without one, as before tokens).
    Hello(Hello),
    /// Server → driver: go ahead, here are my rails.
    Rails(HostRails),
    /// Server → driver: the schedule does not explain this hello.
    Refused(String),
    /// Driver → server: this step's tests are over.
    Done(StepId),
}

/// Why a line is no message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    #[error("a control line of {0} bytes (at most {MAX_LINE})")]
    TooLong(usize),
    #[error("a control line that is not a message: {0}")]
    NotAMessage(String),
}

impl Message {
    /// The message as one line, newline included.
    pub fn encode(&self) -> String {
        let mut s = serde_json::to_string(self).expect("messages serialize");
        s.push('\n');
        s
    }

    /// One line (its newline optional) as a message.
    pub fn decode(line: &str) -> Result<Message, ControlError> {
        if line.len() > MAX_LINE {
            return Err(ControlError::TooLong(line.len()));
        }
        serde_json::from_str(line.trim_end_matches(['\n', '\r']))
            .map_err(|e| ControlError::NotAMessage(e.to_string()))
    }
}

/// Whether `me` (an index into the schedule) should answer `hello`: its sender must be a
/// host of the list that drives `me` in that round and phase. Errors say why not.
pub fn admit(schedule: &Schedule, me: usize, hello: &StepId) -> Result<(), String> {
    let from = schedule
        .index(&hello.from)
        .map_err(|_| format!("{:?} is not a host of this sweep", hello.from))?;
    if hello.round >= schedule.rounds() {
        return Err(format!(
            "round {} is past the sweep's {} rounds",
            hello.round,
            schedule.rounds()
        ));
    }
    if schedule.partner(me, hello.round) != Some(from) {
        return Err(format!(
            "{} is not {}'s partner in round {}",
            hello.from,
            schedule.hosts()[me],
            hello.round
        ));
    }
    if schedule.role(from, hello.round, hello.phase) != Some(Role::Drive) {
        return Err(format!(
            "{} does not drive in round {} {:?}",
            hello.from, hello.round, hello.phase
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rails::Nic;
    use crate::schedule::Mode;
    use proptest::prelude::*;

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node{i:02}")).collect()
    }

    #[test]
    fn messages_round_trip_as_one_line_each() {
        let step = StepId {
            from: "node01".into(),
            round: 2,
            phase: Phase::Reverse,
        };
        let msgs = [
            Message::Hello(Hello::new(step.clone(), None)),
            Message::Hello(Hello::new(step, Some(Token::new("s3cret").unwrap()))),
            Message::Rails(HostRails {
                host: "node02".into(),
                nics: vec![Nic {
                    name: "mlx5_0:1".into(),
                    netdev: Some("ens1np0".into()),
                    up: true,
                    line_rate_gbps: Some(400.0),
                    addr: Some("10.0.0.2".into()),
                }],
            }),
            Message::Refused("no".into()),
        ];
        for m in msgs {
            let line = m.encode();
            assert_eq!(line.matches('\n').count(), 1, "{line}");
            assert_eq!(Message::decode(&line).unwrap(), m);
        }
        assert_eq!(
            Message::encode(&Message::Done(StepId {
                from: "a".into(),
                round: 0,
                phase: Phase::Forward
            })),
            "{\"done\":{\"from\":\"a\",\"round\":0,\"phase\":\"forward\"}}\n"
        );
    }

    #[test]
    fn hellos_are_admitted_only_with_the_sweeps_token() {
        let t = |s: &str| Token::new(s).unwrap();
        assert!(Token::admits(None, None));
        assert!(Token::admits(Some(&t("abc")), Some(&t(" abc\n"))));
        assert!(!Token::admits(Some(&t("abc")), Some(&t("abd"))));
        assert!(!Token::admits(Some(&t("abc")), Some(&t("abcd"))));
        assert!(!Token::admits(Some(&t("abc")), None));
        assert!(!Token::admits(None, Some(&t("abc"))));
        // A hello of a sweep without tokens still reads (no token field).
        let old = "{\"hello\":{\"from\":\"a\",\"round\":0,\"phase\":\"forward\"}}";
        let Message::Hello(h) = Message::decode(old).unwrap() else {
            panic!("not a hello")
        };
        assert_eq!(h.token, None);
        // Never shown.
        let shown = format!(
            "{:?}",
            Message::Hello(Hello::new(h.step(), Some(t("s3cret"))))
        );
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_eq!(Token::new(" \n").unwrap_err(), "the token is empty");
        assert!(Token::new("a\nb").unwrap_err().contains("one line"));
        assert!(Token::new(&"x".repeat(MAX_TOKEN + 1))
            .unwrap_err()
            .contains("over the limit"));
    }

    #[test]
    fn faults_are_named() {
        let e = Message::decode(&"x".repeat(MAX_LINE + 1)).unwrap_err();
        assert_eq!(e, ControlError::TooLong(MAX_LINE + 1));
        let e = Message::decode("{\"hello\":{\"from\":\"a\",\"round\":0}}").unwrap_err();
        assert!(e.to_string().contains("missing field `phase`"), "{e}");
        let e = Message::decode("{\"bye\":1}").unwrap_err();
        assert!(e.to_string().contains("unknown variant `bye`"), "{e}");
    }

    #[test]
    fn only_the_scheduled_driver_is_admitted() {
        let s = Schedule::new(hosts(4), Mode::Default).unwrap();
        for round in 0..s.rounds() {
            for me in 0..4 {
                let Some(p) = s.partner(me, round) else {
                    continue;
                };
                for phase in Phase::BOTH {
                    let hello = StepId {
                        from: s.hosts()[p].clone(),
                        round,
                        phase,
                    };
                    let ok = admit(&s, me, &hello);
                    let drives = s.role(p, round, phase) == Some(Role::Drive);
                    assert_eq!(
                        ok.is_ok(),
                        drives,
                        "round {round} {phase:?} {me}<-{p}: {ok:?}"
                    );
                }
                let other = (0..4).find(|&o| o != me && o != p).unwrap();
                let e = admit(
                    &s,
                    me,
                    &StepId {
                        from: s.hosts()[other].clone(),
                        round,
                        phase: Phase::Forward,
                    },
                )
                .unwrap_err();
                assert!(e.contains("is not"), "{e}");
            }
        }
        let e = admit(
            &s,
            0,
            &StepId {
                from: "intruder".into(),
                round: 0,
                phase: Phase::Forward,
            },
        )
        .unwrap_err();
        assert_eq!(e, "\"intruder\" is not a host of this sweep");
        let e = admit(
            &s,
            0,
            &StepId {
                from: "node01".into(),
                round: 99,
                phase: Phase::Forward,
            },
        )
        .unwrap_err();
        assert!(e.starts_with("round 99 is past"), "{e}");
    }

    proptest! {
        /// The comparison is equality, whatever the bytes and lengths.
        #[test]
        fn same_is_equality(a in proptest::collection::vec(any::<u8>(), 0..40), b in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(same(&a, &b), a == b);
            prop_assert!(same(&a, &a));
        }

        /// Any line: a message or an error, never a panic.
        #[test]
        fn any_line_is_decoded_or_refused(line in "\\PC{0,200}") {
            let _ = Message::decode(&line);
        }

        /// Any hello against any schedule: admitted or refused, never a panic.
        #[test]
        fn any_hello_is_judged(n in 2usize..40, me in 0usize..40, from in "node[0-9]{2}", round in 0usize..8, fwd: bool) {
            let s = Schedule::new(hosts(n), Mode::Default).unwrap();
            let phase = if fwd { Phase::Forward } else { Phase::Reverse };
            let _ = admit(&s, me % n, &StepId { from, round, phase });
        }
    }
}
