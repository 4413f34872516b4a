//! A plain HTTP/1.x connection parked while idle: the socket off the reactor and
//! what its task needs to go on, with no task, timer or wakeup of its own.

use std::os::fd::{AsRawFd, RawFd};

use tokio::net::TcpStream;
use tokio::time::Instant;

use super::client::{ClientStream, Detach};
use super::{Line, Start, serve_line};
use crate::proxy::workers::{self, Parked};

/// An idle connection between two requests, parked: its socket off the reactor.
struct ParkedLine {
    line: Line<std::net::TcpStream>,
    /// Its keep-alive deadline, kept when it is woken.
    deadline: Instant,
}

/// Parks the idle `line` until its next request, its client's close or `deadline`. None
/// when the connection was parked (or lost on the way: its socket could not be taken off
/// the reactor); the line back when it cannot be parked (this kind of connection, or a
/// thread without parking), to wait in its task.
pub(super) fn park<C: ClientStream>(line: Line<C>, deadline: Instant) -> Option<Line<C>> {
    if !workers::parks() {
        return Some(line);
    }
    let (client, rest) = line.split();
    let socket = match client.detach() {
        Detach::Off(socket) => socket,
        Detach::Kept(client) => return Some(rest.join(client)),
        Detach::Failed(error) => {
            tracing::debug!(peer = %rest.peer, %error, "an idle connection lost while being parked");
            return None;
        }
    };
    let parked = Box::new(ParkedLine {
        line: rest.join(socket),
        deadline,
    });
    if let Err(parked) = workers::park(parked, deadline) {
        // Back to a task of its own, which does not try again.
        parked.resume(false);
    }
    None
}

impl Parked for ParkedLine {
    fn fd(&self) -> RawFd {
        self.line.client.as_raw_fd()
    }

    fn closing(&self) -> bool {
        self.line.closing.now()
    }

    fn resume(self: Box<Self>, park_again: bool) {
        let ParkedLine { line, deadline } = *self;
        let (socket, rest) = line.split();
        let client = match TcpStream::from_std(socket) {
            Ok(client) => client,
            Err(error) => {
                return tracing::debug!(peer = %rest.peer, %error, "a parked connection lost when woken");
            }
        };
        tokio::spawn(serve_line(
            rest.join(client),
            Start::Resumed {
                deadline,
                park_again,
            },
        ));
    }
}
