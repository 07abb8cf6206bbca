//! A TCP relay the test controls, put between a client and its server: it counts the bytes it
//! carries both ways and can cut the link (every connection closed, new ones closed as soon as
//! they are accepted) and restore it. `Drop` stops it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    cut: AtomicBool,
    /// Client to server, and back.
    up: AtomicU64,
    down: AtomicU64,
    accepted: AtomicU64,
    /// Connections accepted while cut, and closed at once.
    refused: AtomicU64,
    conns: Mutex<Vec<TcpStream>>,
}

pub struct Relay {
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on a free loopback port, relaying each connection to `to`.
    pub fn start(to: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind relay");
        let port = l.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let accept = std::thread::spawn(move || {
            for c in l.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = c else { continue };
                if s.cut.load(Ordering::SeqCst) {
                    s.refused.fetch_add(1, Ordering::SeqCst);
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(to) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                s.accepted.fetch_add(1, Ordering::SeqCst);
                // Each read is passed on at once, as a router would, not held for an ACK.
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut conns = s.conns.lock().unwrap();
                    conns.push(client.try_clone().unwrap());
                    conns.push(server.try_clone().unwrap());
                }
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    s.clone(),
                    true,
                );
                pipe(server, client, s.clone(), false);
            }
        });
        Relay {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// Closes every relayed connection; until [`Relay::restore`], new ones are closed at once.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        for c in self.shared.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    /// Bytes relayed so far, both ways.
    pub fn bytes(&self) -> u64 {
        self.shared.up.load(Ordering::SeqCst) + self.shared.down.load(Ordering::SeqCst)
    }

    /// Connections relayed so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections closed at once because the link was cut.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, s: Arc<Shared>, up: bool) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16384];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
            let counter = if up { &s.up } else { &s.down };
            counter.fetch_add(n as u64, Ordering::SeqCst);
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.cut();
        // Wakes the accepting thread.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}
