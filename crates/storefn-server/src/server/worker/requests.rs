//! Requests as they arrive: a frame is validated whole, then each request is answered at once
//! (HELLO, AUTH, LOAD_PROG, STAT, WRITE) or queued for the engine (READ, XRP, LAMBDA).

use std::sync::atomic::Ordering;

use storefn_vm::ProgType;

use super::job::Target;
use super::out::open_frame;
use super::writes::{charge_write, open_for_write};
use super::{Conn, TenantName, Worker};
use crate::access::Intent;
use crate::auth;
use crate::registry::ProgHash;
use crate::server::files::FileFail;
use crate::server::MAX_IN_FLIGHT_PER_CONN;
use storefn_wire::limits::MAX_FRAME_BYTES;
use storefn_wire::{
    op, put_response, put_status, Messages, ProtoError, Request, Response, StatusCode, HASH_BYTES,
    HELLO_FLAG_AUTH_REQUIRED,
};

impl Worker<'_> {
    /// Handles a frame's requests from the `from`th on; returns how many it handled in all,
    /// fewer than `count` when the connection's tenant spent this pass's CPU budget (the rest
    /// waits in the receive buffer for the next pass).
    pub(super) fn handle_frame(
        &mut self,
        ci: u32,
        body: &[u8],
        count: u32,
        frame: u64,
        from: u32,
    ) -> Result<u32, ProtoError> {
        // Validate the whole frame before acting on any of it: a malformed frame does nothing.
        if from == 0 {
            let t0 = std::time::Instant::now();
            for m in Messages::new(body, count, frame) {
                Request::parse(&m?)?;
            }
            self.charge_conn(ci, t0);
        }
        let mut done = from;
        for m in Messages::new(body, count, frame).skip(from as usize) {
            let Some(tenant) = self.conns[ci as usize].as_ref().map(|c| c.tenant) else { break };
            // At least one request per call, so a frame whose validation alone spends the
            // pass still moves on.
            if done > from && tenant.is_some_and(|t| self.sched.pass_spent(t)) {
                break;
            }
            let t0 = std::time::Instant::now();
            self.req_started = t0;
            let m = m.expect("validated");
            let r = Request::parse(&m).expect("validated");
            self.shared.stats.requests.fetch_add(1, Ordering::Relaxed);
            let fence = self.shared.cfg.fence.as_deref();
            match crate::server::fence::refusal(fence, &r, m.fence) {
                Some((st, why)) if self.conn(ci).authed => {
                    self.respond_err(ci, m.req_id, r.op(), st, &why);
                }
                _ => self.handle_request(ci, m.req_id, &r),
            }
            done += 1;
            if matches!(r, Request::Hello { .. } | Request::Auth { .. }) {
                // The tenant may have been set now: it starts paying from its next request.
            } else {
                self.charge_conn(ci, t0);
            }
            if self.conns[ci as usize].as_ref().is_none_or(|c| c.closing.is_some()) {
                done = count;
                break;
            }
        }
        self.run_offload_batch(ci);
        Ok(done)
    }

    pub(super) fn conn(&mut self, ci: u32) -> &mut Conn {
        self.conns[ci as usize].as_mut().expect("live connection")
    }

    pub(super) fn respond_err(
        &mut self,
        ci: u32,
        req_id: u64,
        op_code: u8,
        st: StatusCode,
        msg: &str,
    ) {
        let c = self.conn(ci);
        open_frame(c);
        put_status(&mut c.frame, req_id, op_code, st, msg);
    }

    pub(super) fn respond(&mut self, ci: u32, req_id: u64, op_code: u8, r: &Response<'_>) {
        let c = self.conn(ci);
        open_frame(c);
        put_response(&mut c.frame, req_id, op_code, r);
    }

    /// One request of a validated frame: HELLO and AUTH, then (authenticated) the requests
    /// answered at once, or queued for the engine.
    fn handle_request(&mut self, ci: u32, req_id: u64, r: &Request<'_>) {
        let code = r.op();
        match *r {
            Request::Hello { tenant } => return self.hello(ci, req_id, tenant),
            Request::Auth { mac } => return self.auth(ci, req_id, mac),
            _ => {}
        }
        let c = self.conn(ci);
        if c.hello.is_none() {
            return self.respond_err(ci, req_id, code, StatusCode::BadRequest, "HELLO first");
        }
        if !c.authed {
            return self.respond_err(ci, req_id, code, StatusCode::AuthRequired, "AUTH first");
        }
        if !self.handle_immediate(ci, req_id, r) {
            self.handle_queued(ci, req_id, r);
        }
    }

    /// HELLO: the tenant's name and, when the server requires authentication, a challenge. The
    /// name is recorded as a tenant only once it may send requests (here without
    /// authentication, at AUTH with it): names sent before AUTH never fill the tenant table.
    fn hello(&mut self, ci: u32, req_id: u64, tenant: &[u8]) {
        let code = op::HELLO;
        let auth_needed = self.shared.cfg.tokens.is_some();
        if self.conn(ci).hello.is_some() {
            return self.respond_err(ci, req_id, code, StatusCode::BadRequest, "HELLO sent twice");
        }
        let t = if auth_needed {
            None
        } else {
            let Some(t) = self.hold_tenant(ci, tenant) else {
                return self.refuse_tenant(ci, req_id, code);
            };
            Some(t)
        };
        let challenge = if auth_needed { auth::challenge() } else { [0; HASH_BYTES] };
        let c = self.conn(ci);
        c.hello = Some(TenantName::new(tenant));
        c.tenant = t;
        c.challenge = challenge;
        if !auth_needed {
            self.authenticated(ci);
        }
        let c = self.conns[ci as usize].as_ref().expect("live");
        self.log(c, "hello", "");
        let flags = if auth_needed { HELLO_FLAG_AUTH_REQUIRED } else { 0 };
        let resp = Response::Hello {
            challenge: &challenge,
            flags,
            max_frame_bytes: u32::try_from(MAX_FRAME_BYTES).expect("1 MiB"),
            max_in_flight: MAX_IN_FLIGHT_PER_CONN,
        };
        self.respond(ci, req_id, code, &resp);
    }

    /// The connection may send requests now: it leaves the pre-auth counts.
    fn authenticated(&mut self, ci: u32) {
        let c = self.conns[ci as usize].as_mut().expect("live connection");
        c.authed = true;
        let peer = c.peer.ip();
        c.meter.tenant = self.shared.metrics.tenant(c.hello.as_ref().expect("HELLO").as_bytes());
        let mut counts = self.shared.conn_counts();
        counts.authenticated(peer);
    }

    /// The tenant entry of `name` (connection `ci`'s, its scope set), held; a fresh entry's CPU
    /// usage starts again.
    fn hold_tenant(&mut self, ci: u32, name: &[u8]) -> Option<u32> {
        let budget = self.shared.insn_budget(name, self.conn(ci).scope);
        let (t, fresh) = self.tenants.hold_name(name, budget)?;
        if fresh {
            self.sched.forget(t);
            self.tenants.set_meter(t, self.shared.metrics.tenant(name));
        }
        Some(t)
    }

    /// Charges the connection's tenant the CPU time since `t0`.
    pub(super) fn charge_conn(&mut self, ci: u32, t0: std::time::Instant) {
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if let Some(t) = self.conns[ci as usize].as_ref().and_then(|c| c.tenant) {
            self.sched.charge(t, ns);
            self.meter_request_cpu(t, ns);
        }
    }

    fn refuse_tenant(&mut self, ci: u32, req_id: u64, code: u8) {
        let m = "too many tenants on this server thread";
        self.respond_err(ci, req_id, code, StatusCode::Limit, m);
        self.conn(ci).closing = Some(m);
    }

    /// AUTH: the MAC over the challenge and the HELLO name; on success the name becomes the
    /// connection's tenant.
    fn auth(&mut self, ci: u32, req_id: u64, mac: &[u8; HASH_BYTES]) {
        let code = op::AUTH;
        let c = self.conn(ci);
        let (Some(name), challenge) = (c.hello, c.challenge) else {
            return self.respond_err(ci, req_id, code, StatusCode::BadRequest, "HELLO first");
        };
        if c.authed {
            return self.respond_err(ci, req_id, code, StatusCode::BadRequest, "AUTH sent twice");
        }
        let name = name.as_bytes();
        let token = self.shared.cfg.tokens.as_ref().and_then(|toks| {
            toks.iter().position(|k| {
                k.tenant.as_bytes() == name && auth::verify(&k.secret, &challenge, name, mac)
            })
        });
        let Some(token) = token else {
            self.shared.stats.auth_failures.fetch_add(1, Ordering::Relaxed);
            let m = "wrong MAC or unknown tenant";
            self.respond_err(ci, req_id, code, StatusCode::AuthFailed, m);
            self.conn(ci).closing = Some("authentication failed");
            return;
        };
        self.conn(ci).scope = u32::try_from(token).expect("token files are small");
        let Some(t) = self.hold_tenant(ci, name) else {
            return self.refuse_tenant(ci, req_id, code);
        };
        self.conn(ci).tenant = Some(t);
        self.authenticated(ci);
        let c = self.conns[ci as usize].as_ref().expect("live");
        self.log(c, "authenticated", "");
        self.respond(ci, req_id, code, &Response::Auth);
    }

    /// Requests answered without the engine (LOAD_PROG, STAT, WRITE, LAMBDA_WRITE); `false`
    /// for the others.
    fn handle_immediate(&mut self, ci: u32, req_id: u64, r: &Request<'_>) -> bool {
        let t0 = std::time::Instant::now();
        let handled = self.immediate(ci, req_id, r);
        if handled {
            self.meter_inline(r.op(), t0);
        }
        handled
    }

    fn immediate(&mut self, ci: u32, req_id: u64, r: &Request<'_>) -> bool {
        let code = r.op();
        let scope = self.conn(ci).scope;
        match *r {
            Request::LoadProg { prog_type, section, elf } => {
                if let Err((st, m)) = self.submit_load(ci, req_id, prog_type, section, elf) {
                    self.respond_err(ci, req_id, code, st, &m);
                }
            }
            Request::Stat { path } => {
                let sh = self.shared;
                let at = sh.policy.resolve(&sh.root, scope, path, Intent::Read);
                match at.and_then(|at| self.files.acquire(&mut self.engine, at, &sh.stats)) {
                    Ok(o) => {
                        self.files.release(o.slot);
                        let resp = Response::Stat { version: o.version, size: o.size };
                        self.respond(ci, req_id, code, &resp);
                    }
                    Err((st, m)) => self.respond_err(ci, req_id, code, st, &m),
                }
            }
            Request::Write { path, offset, data } => {
                if let Err((st, m)) = self.write_checks(ci, data.len()) {
                    self.respond_err(ci, req_id, code, st, &m);
                    return true;
                }
                let n = data.len() as u64;
                let target = open_for_write(self.shared, scope, path)
                    .and_then(|f| charge_write(self.shared, scope, &f, offset, n).map(|c| (f, c)));
                match target {
                    Ok((f, charge)) => {
                        self.submit_write(ci, req_id, code, f, charge, offset, data, n);
                    }
                    Err((st, m)) => self.respond_err(ci, req_id, code, st, &m),
                }
            }
            Request::LambdaWrite { path, offset, hash, input, out_cap } => {
                if let Err((st, m)) = self.write_checks(ci, out_cap as usize).and_then(|()| {
                    self.lambda_write(ci, req_id, scope, path, offset, hash, input, out_cap)
                }) {
                    self.respond_err(ci, req_id, code, st, &m);
                }
            }
            _ => return false,
        }
        true
    }

    /// Requests that go to the engine (READ, XRP, LAMBDA) or the offload engine (OFFLOAD).
    fn handle_queued(&mut self, ci: u32, req_id: u64, r: &Request<'_>) {
        match *r {
            Request::Read { path, offset, len } => {
                self.queue_read(ci, req_id, Target { path, offset, len });
            }
            Request::Xrp { path, offset, len, hash, scratch, out_len } => {
                let t = Target { path, offset, len };
                self.queue_xrp(ci, req_id, t, hash, scratch, out_len);
            }
            Request::Lambda { path, offset, len, hash, out_cap } => {
                self.queue_lambda(ci, req_id, Target { path, offset, len }, hash, out_cap);
            }
            Request::Offload { msg } => self.queue_offload(ci, req_id, msg),
            _ => unreachable!("every other request is answered at once"),
        }
    }

    /// What every WRITE and LAMBDA_WRITE checks before it runs: the server is not stopping,
    /// the connection has room in flight, the thread's write queue has room for `bytes`.
    fn write_checks(&mut self, ci: u32, bytes: usize) -> Result<(), FileFail> {
        if self.stopping() {
            return Err((StatusCode::ShuttingDown, "server is stopping".into()));
        }
        if self.conn(ci).in_flight >= MAX_IN_FLIGHT_PER_CONN {
            return Err((StatusCode::Limit, "too many requests in flight".into()));
        }
        if !self.write_room(bytes) {
            return Err((StatusCode::Limit, "this server thread's write queue is full".into()));
        }
        Ok(())
    }

    /// LAMBDA_WRITE: the program runs over the input into the thread's staging buffer, then
    /// its output goes to the writer thread like a WRITE's data: written at `offset` of the
    /// file (opened beneath the root, which must exist) and `fdatasync`ed before the version
    /// is answered, so an acknowledged λ write is durable.
    #[allow(clippy::too_many_arguments)]
    fn lambda_write(
        &mut self,
        ci: u32,
        req_id: u64,
        scope: u32,
        path: &[u8],
        offset: u64,
        hash: &ProgHash,
        input: &[u8],
        out_cap: u32,
    ) -> Result<(), FileFail> {
        // The file first: a path outside the scope or missing costs no program run.
        let f = open_for_write(self.shared, scope, path)?;
        let si = self.progs.acquire(self.shared, hash, ProgType::Lambda)?;
        let cap = out_cap as usize;
        if self.write_staging.len() < cap {
            self.write_staging.resize(cap, 0);
        }
        let out = &mut self.write_staging[..cap];
        out.fill(0);
        let tenant = self.conns[ci as usize].as_ref().and_then(|c| c.tenant).expect("authed");
        let budget = self.tenants.budget(tenant);
        let inst = match self.progs.instance(si) {
            Ok(i) => i,
            Err(e) => {
                self.progs.release(si);
                return Err(e);
            }
        };
        inst.set_insn_budget(budget);
        let ran = inst.run_lambda(input, out);
        let insns = inst.insns_used();
        self.progs.release(si);
        if let Some(m) = self.tenants.meter(tenant) {
            m.instructions(insns);
        }
        let ret = ran.map_err(|e| (StatusCode::ChainFailed, e.to_string()))?;
        let n = usize::try_from(ret).ok().filter(|&n| n <= cap).ok_or_else(|| {
            let m = format!("program returned {ret} output bytes, more than out_cap {out_cap}");
            (StatusCode::ChainFailed, m)
        })?;
        offset
            .checked_add(ret)
            .ok_or((StatusCode::OutOfRange, "offset + output overflows".into()))?;
        let charge = charge_write(self.shared, scope, &f, offset, n as u64)?;
        let staged = std::mem::take(&mut self.write_staging);
        self.submit_write(ci, req_id, op::LAMBDA_WRITE, f, charge, offset, &staged[..n], ret);
        self.write_staging = staged;
        Ok(())
    }
}
