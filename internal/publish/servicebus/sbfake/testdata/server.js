// sbfake: a small AMQP 1.0 stand-in for Azure Service Bus, for tests only.
//
// It is NOT a Service Bus emulator. It implements the part of the protocol
// that the Go SDK (azservicebus) uses to send and to receive in peek-lock
// mode, with the semantics walpost's tests rely on:
//
//   - SASL ANONYMOUS on plain TCP (what the SDK does with a connection
//     string that says UseDevelopmentEmulator=true);
//   - claims-based auth: put-token on $cbs, answered 202 (or 401 for an
//     entity created with unauthorized: true);
//   - queues, created through the control API; attaching to any other
//     entity is refused with amqp:not-found, like Service Bus does;
//   - sending: single messages and batches (message format 0x80013700),
//     a max-message-size per entity advertised on attach and enforced
//     (amqp:link:message-size-exceeded), duplicate detection by MessageId
//     within a window, injected faults (the next n transfers rejected with a
//     given condition, e.g. com.microsoft:server-busy);
//   - receiving in peek-lock mode: sequence numbers, enqueued time, locked
//     until, delivery count, the delivery tag as lock token; settlement by
//     disposition (accepted = complete; modified = abandon, the message is
//     delivered again with its delivery count up by one; released = given
//     back without counting the delivery, as Service Bus does: the SDK
//     releases what arrives on its credit between two receive calls;
//     rejected = dead-letter, which here means removed); a lock that
//     expires makes the message available again, and a later complete of
//     it fails with com.microsoft:message-lock-lost; a closed link or
//     connection gives its locked messages back;
//   - the management operation com.microsoft:peek-message;
//   - scheduled messages sent with the message annotation
//     x-opt-scheduled-enqueue-time (the SDK's ScheduledEnqueueTime): stored
//     at once (counted as scheduled), but neither received nor peeked before
//     that time, when they are enqueued (their enqueued time is it);
//   - time to live (the header's ttl, the SDK's TimeToLive), from the
//     enqueued time: an expired message is never delivered and is removed
//     (counted as expired; Service Bus would dead-letter it only when the
//     entity says so).
//
// Topics, subscriptions, sessions-as-locks, deferral, the management
// operation schedule-message, transactions and the other management
// operations are not implemented.
//
// It prints one line of JSON on stdout, {"amqp":PORT,"control":PORT}, and
// logs to stderr. It exits when stdin closes, so that it never outlives the
// test process that started it. The control API is HTTP with JSON bodies:
//
//   PUT    /entities/NAME          {maxMessageSize, duplicateDetectionMs, lockDurationMs, unauthorized, discard}
//   DELETE /entities/NAME
//   GET    /entities/NAME          counters: stored, active, locked, transfers, completed, abandoned, ...
//   POST   /entities/NAME/faults   {count, condition, description}
'use strict';

const http = require('http');
const crypto = require('crypto');
const rhea = require('rhea');

const types = rhea.types;
const message = rhea.message;

const BATCH_FORMAT = 0x80013700;
const SECTION_HEADER = 0x70;
const SECTION_DELIVERY_ANNOTATIONS = 0x71;
const SECTION_MESSAGE_ANNOTATIONS = 0x72;
const SECTION_DATA = 0x75;

function log(...args) {
    if (process.env.SBFAKE_DEBUG) console.error('sbfake:', ...args);
}

// rhea decodes messages of format 0 and drops the bytes; keep them, since
// the stand-in stores messages as the sender encoded them.
const decode = message.decode;
message.decode = function (buffer) {
    const m = decode(buffer);
    Object.defineProperty(m, 'raw', {value: buffer, enumerable: false});
    return m;
};

// ---- entities -------------------------------------------------------------

const entities = new Map(); // lower-case name -> entity

function newEntity(name, o) {
    return {
        name,
        maxMessageSize: o.maxMessageSize || 256 * 1024,
        duplicateDetectionMs: o.duplicateDetectionMs || 0,
        lockDurationMs: o.lockDurationMs || 60000,
        unauthorized: !!o.unauthorized,
        discard: !!o.discard,
        messages: [], // stored messages in sequence order: available and locked
        nextSeq: 1,
        seen: new Map(), // message id -> time stored (duplicate detection)
        faults: [],
        consumers: new Set(), // server-side sender links reading from the entity
        counters: {stored: 0, transfers: 0, batches: 0, duplicates: 0, rejected: 0,
            completed: 0, abandoned: 0, released: 0, deadLettered: 0, lockExpired: 0, lockLost: 0,
            scheduled: 0, expired: 0},
    };
}

function entityOf(address) {
    if (typeof address !== 'string') return undefined;
    // The SDK uses the entity path; accept a full URL too.
    const m = /^[a-z]+:\/\/[^/]+\/(.*)$/i.exec(address);
    const path = m ? m[1] : address;
    return entities.get(path.toLowerCase());
}

// ---- AMQP encoding helpers -----------------------------------------------

// sections splits an encoded message into its sections: [{code, bytes}].
function sections(buffer) {
    const out = [];
    const reader = new types.Reader(buffer);
    while (reader.remaining()) {
        const start = reader.position;
        const s = reader.read();
        let code = s.descriptor ? s.descriptor.value : undefined;
        if (typeof code !== 'number') code = Number(code);
        out.push({code, value: s, bytes: buffer.slice(start, reader.position)});
    }
    return out;
}

function encode(typed) {
    const w = new types.Writer();
    w.write(typed);
    return w.toBuffer();
}

// forDelivery returns the stored message's bytes with a fresh header
// (delivery count) and message annotations (sequence number, enqueued time,
// locked until) in place of the sender's.
function forDelivery(m, lockedUntil) {
    const header = encode(types.described(types.wrap_ulong(SECTION_HEADER),
        types.wrap_list([true, null, m.ttl ? types.wrap_uint(m.ttl) : null, false, types.wrap_uint(m.deliveries)])));
    const ann = {
        'x-opt-sequence-number': types.wrap_long(m.seq),
        'x-opt-enqueued-time': types.wrap_timestamp(m.enqueuedAt),
    };
    if (m.scheduledAt) ann['x-opt-scheduled-enqueue-time'] = types.wrap_timestamp(m.scheduledAt);
    if (lockedUntil) ann['x-opt-locked-until'] = types.wrap_timestamp(lockedUntil);
    if (m.sessionId !== undefined) ann['x-opt-session-id'] = m.sessionId;
    const annotations = encode(types.described(types.wrap_ulong(SECTION_MESSAGE_ANNOTATIONS), types.wrap_symbolic_map(ann)));
    const rest = m.sections.filter(s => s.code !== SECTION_HEADER && s.code !== SECTION_DELIVERY_ANNOTATIONS && s.code !== SECTION_MESSAGE_ANNOTATIONS);
    return Buffer.concat([header, annotations, ...rest.map(s => s.bytes)]);
}

// ---- storing --------------------------------------------------------------

// unbatch returns the encoded messages a transfer carries: itself, or for
// the batch format the messages in its data sections.
function unbatch(ctx) {
    if (ctx.format === BATCH_FORMAT) {
        return sections(ctx.message).filter(s => s.code === SECTION_DATA).map(s => s.value.value);
    }
    if (ctx.format) throw new Error('unsupported message format ' + ctx.format);
    return [ctx.message.raw];
}

function store(e, raw) {
    const decoded = decode(raw);
    const id = decoded.message_id === undefined ? undefined : String(decoded.message_id);
    const now = Date.now();
    if (e.duplicateDetectionMs && id !== undefined) {
        const at = e.seen.get(id);
        if (at !== undefined && now - at < e.duplicateDetectionMs) {
            e.counters.duplicates++;
            return;
        }
        e.seen.set(id, now);
    }
    e.counters.stored++;
    if (e.discard) return;
    // Scheduled: enqueued (visible) at that time, not before.
    const ann = decoded.message_annotations || {};
    let scheduledAt = ann['x-opt-scheduled-enqueue-time'];
    if (scheduledAt !== undefined && scheduledAt !== null) {
        scheduledAt = scheduledAt instanceof Date ? scheduledAt.getTime() : Number(scheduledAt);
        e.counters.scheduled++;
        log('scheduled', e.name, id, new Date(scheduledAt).toISOString());
    } else {
        scheduledAt = undefined;
    }
    const enqueuedAt = scheduledAt && scheduledAt > now ? scheduledAt : now;
    const ttl = decoded.ttl ? Number(decoded.ttl) : 0;
    e.messages.push({
        seq: e.nextSeq++,
        id,
        sessionId: decoded.group_id,
        enqueuedAt,
        scheduledAt,
        ttl,
        expiresAt: ttl ? enqueuedAt + ttl : 0,
        sections: sections(raw),
        size: raw.length,
        deliveries: 0, // how often it was delivered under a lock
        lock: null,    // {token, link, delivery, until}
    });
}

// ---- receiving (peek-lock) ------------------------------------------------

const locks = new Map(); // lock token (hex) -> {entity, msg}

// visible reports whether m may be delivered or peeked now: enqueued (its
// scheduled time has come) and not expired. An expired message that is
// not locked is removed on the way.
function visible(e, m, now) {
    if (m.enqueuedAt > now) return false;
    if (m.expiresAt && m.expiresAt <= now && !m.lock) {
        e.counters.expired++;
        log('expired', e.name, m.seq);
        remove(e, m);
        return false;
    }
    return true;
}

function pump(e) {
    for (const link of e.consumers) {
        while (link.sendable()) {
            const now = Date.now();
            const m = e.messages.slice().find(x => !x.lock && visible(e, x, now));
            if (!m) return;
            const token = crypto.randomBytes(16);
            const until = Date.now() + e.lockDurationMs;
            const bytes = forDelivery(m, until);
            m.deliveries++;
            const delivery = link.send(bytes, token, 0);
            m.lock = {token: token.toString('hex'), link, delivery, until};
            delivery.sbfake = {entity: e, msg: m, token: m.lock.token};
            locks.set(m.lock.token, {entity: e, msg: m});
            log('delivered', e.name, m.seq, 'count', m.deliveries);
        }
    }
}

function unlock(e, m) {
    if (m.lock) locks.delete(m.lock.token);
    m.lock = null;
}

function remove(e, m) {
    unlock(e, m);
    const i = e.messages.indexOf(m);
    if (i >= 0) e.messages.splice(i, 1);
}

// settle handles the receiver's outcome for a delivery of ours.
function settle(ctx, outcome) {
    const d = ctx.delivery;
    const info = d.sbfake;
    if (!info) {
        d.update(true);
        return;
    }
    const {entity: e, msg: m, token} = info;
    if (!m.lock || m.lock.token !== token) {
        // The lock expired (and the message may have been delivered again).
        if (outcome === 'accepted' || outcome === 'rejected') {
            e.counters.lockLost++;
            d.update(true, message.rejected({error: {condition: 'com.microsoft:message-lock-lost',
                description: 'sbfake: the lock supplied is invalid: it expired, or the message was delivered again'}}).described());
        } else {
            d.update(true);
        }
        return;
    }
    switch (outcome) {
    case 'accepted':
        e.counters.completed++;
        remove(e, m);
        break;
    case 'rejected':
        e.counters.deadLettered++;
        remove(e, m);
        break;
    case 'released':
        // Not a delivery attempt (AMQP 1.0 3.4.4; Service Bus does not
        // count it either): the delivery count stays as it was.
        e.counters.released++;
        m.deliveries = Math.max(0, m.deliveries - 1);
        unlock(e, m);
        break;
    default: // modified: abandon
        e.counters.abandoned++;
        unlock(e, m);
    }
    d.update(true);
    pump(e);
}

setInterval(() => {
    const now = Date.now();
    // Scheduled messages whose time came, expired ones to remove.
    for (const e of entities.values()) {
        if (e.messages.some(m => !m.lock && (m.enqueuedAt <= now && m.enqueuedAt > now - 1000 || m.expiresAt && m.expiresAt <= now))) {
            for (const m of e.messages.slice()) if (!m.lock) visible(e, m, now);
            pump(e);
        }
    }
    for (const {entity: e, msg: m} of Array.from(locks.values())) {
        if (m.lock && m.lock.until <= now) {
            e.counters.lockExpired++;
            unlock(e, m);
            pump(e);
        }
    }
}, 50).unref();

function releaseLinks(pred) {
    for (const e of entities.values()) {
        let changed = false;
        for (const m of e.messages) {
            if (m.lock && pred(m.lock.link)) {
                unlock(e, m);
                changed = true;
            }
        }
        for (const l of Array.from(e.consumers)) {
            if (pred(l)) e.consumers.delete(l);
        }
        if (changed) pump(e);
    }
}

// ---- management and cbs ---------------------------------------------------

const replyLinks = new Map(); // reply-to address -> server sender link

function reply(request, status, description, body) {
    const to = request.reply_to;
    const link = replyLinks.get(to);
    if (!link) {
        log('no reply link for', to);
        return;
    }
    const m = {
        correlation_id: request.message_id,
        application_properties: {'status-code': types.wrap_int(status), 'status-description': description},
    };
    if (body !== undefined) m.body = body;
    link.send(m);
}

function onCBS(req) {
    const props = req.application_properties || {};
    if (props.operation !== 'put-token') {
        reply(req, 400, 'sbfake: unsupported $cbs operation ' + props.operation);
        return;
    }
    const audience = String(props.name || '');
    for (const e of entities.values()) {
        const path = audience.replace(/^[a-z]+:\/\/[^/]+\//i, '').toLowerCase();
        if (e.unauthorized && (path === e.name.toLowerCase() || path === e.name.toLowerCase() + '/$management')) {
            reply(req, 401, "Unauthorized access. 'Send' claim(s) are required to perform this operation. (sbfake)");
            return;
        }
    }
    reply(req, 202, 'Accepted');
}

function onManagement(e, req) {
    const props = req.application_properties || {};
    switch (props.operation) {
    case 'com.microsoft:peek-message': {
        const body = req.body || {};
        const from = Number(body['from-sequence-number'] || 0);
        const count = Number(body['message-count'] || 1);
        const now = Date.now();
        const found = e.messages.slice().filter(m => m.seq >= from && visible(e, m, now)).slice(0, count);
        if (found.length === 0) {
            reply(req, 204, 'No Content');
            return;
        }
        reply(req, 200, 'OK', {messages: found.map(m => ({message: forDelivery(m, m.lock ? m.lock.until : undefined)}))});
        return;
    }
    default:
        reply(req, 501, 'sbfake: management operation ' + props.operation + ' is not implemented by the stand-in');
    }
}

// ---- links ----------------------------------------------------------------

const container = rhea.create_container({id: 'sbfake', autoaccept: false, treat_modified_as_released: false});

function echoTermini(link) {
    const a = link.remote.attach;
    link.local.attach.snd_settle_mode = a.snd_settle_mode;
    link.local.attach.rcv_settle_mode = a.rcv_settle_mode;
    link.set_source({address: a.source && a.source.address});
    link.set_target({address: a.target && a.target.address});
}

function refuse(link, condition, description) {
    // An attach with no terminus, then a detach with the error: how a peer
    // refuses a link.
    link.local.attach.source = null;
    link.local.attach.target = null;
    link.close({condition, description});
}

function notFound(address) {
    return "The messaging entity 'sb://sbfake/" + address + "' could not be found. (sbfake: create it through the control API)";
}

// The client sends: we receive ($cbs requests, management requests, messages).
container.on('receiver_open', ctx => {
    const link = ctx.receiver;
    const address = link.remote.attach.target && link.remote.attach.target.address;
    if (address === '$cbs') {
        link.sbfake = {kind: 'cbs'};
        echoTermini(link);
        return;
    }
    if (typeof address === 'string' && address.endsWith('/$management')) {
        const e = entityOf(address.slice(0, -'/$management'.length));
        if (!e) return refuse(link, 'amqp:not-found', notFound(address));
        link.sbfake = {kind: 'mgmt', entity: e};
        echoTermini(link);
        return;
    }
    const e = entityOf(address);
    if (!e) return refuse(link, 'amqp:not-found', notFound(address));
    link.sbfake = {kind: 'entity', entity: e};
    echoTermini(link);
    link.local.attach.max_message_size = e.maxMessageSize;
});

// The client receives: reply links of $cbs and management, and consumers.
container.on('sender_open', ctx => {
    const link = ctx.sender;
    const source = link.remote.attach.source && link.remote.attach.source.address;
    const target = link.remote.attach.target && link.remote.attach.target.address;
    if (source === '$cbs' || (typeof source === 'string' && source.endsWith('/$management'))) {
        if (source !== '$cbs' && !entityOf(source.slice(0, -'/$management'.length))) {
            return refuse(link, 'amqp:not-found', notFound(source));
        }
        link.sbfake = {kind: 'reply', address: target};
        replyLinks.set(target, link);
        echoTermini(link);
        return;
    }
    const e = entityOf(source);
    if (!e) return refuse(link, 'amqp:not-found', notFound(source));
    const filter = link.remote.attach.source && link.remote.attach.source.filter;
    if (filter && Object.keys(filter).length) {
        return refuse(link, 'amqp:not-implemented', 'sbfake: session receivers and filters are not implemented by the stand-in');
    }
    link.sbfake = {kind: 'consumer', entity: e};
    echoTermini(link);
    e.consumers.add(link);
});

container.on('sendable', ctx => {
    const s = ctx.sender.sbfake;
    if (s && s.kind === 'consumer') pump(s.entity);
});

container.on('message', ctx => {
    const s = ctx.receiver.sbfake;
    if (!s) return;
    try {
        if (s.kind === 'cbs') {
            onCBS(ctx.message);
            ctx.delivery.accept();
            return;
        }
        if (s.kind === 'mgmt') {
            onManagement(s.entity, ctx.message);
            ctx.delivery.accept();
            return;
        }
        const e = s.entity;
        e.counters.transfers++;
        if (e.faults.length) {
            const f = e.faults[0];
            if (--f.count <= 0) e.faults.shift();
            e.counters.rejected++;
            ctx.delivery.reject({condition: f.condition, description: f.description || 'sbfake: injected fault'});
            return;
        }
        const size = ctx.format === BATCH_FORMAT ? ctx.message.length : ctx.message.raw.length;
        if (size > e.maxMessageSize) {
            e.counters.rejected++;
            ctx.delivery.reject({condition: 'amqp:link:message-size-exceeded',
                description: 'The received message (size ' + size + ' bytes) exceeds the limit (' + e.maxMessageSize + ' bytes) of entity ' + e.name + ' (sbfake)'});
            return;
        }
        const msgs = unbatch(ctx);
        if (ctx.format === BATCH_FORMAT) e.counters.batches++;
        for (const raw of msgs) store(e, raw);
        ctx.delivery.accept();
        pump(e);
    } catch (err) {
        console.error('sbfake: handling a transfer:', err);
        ctx.delivery.reject({condition: 'amqp:internal-error', description: 'sbfake: ' + err.message});
    }
});

for (const outcome of ['accepted', 'released', 'modified', 'rejected']) {
    container.on(outcome, ctx => settle(ctx, outcome));
}

container.on('sender_close', ctx => {
    const link = ctx.sender;
    if (link.sbfake && link.sbfake.kind === 'reply') replyLinks.delete(link.sbfake.address);
    releaseLinks(l => l === link);
});

function connectionGone(ctx) {
    const conn = ctx.connection;
    for (const [addr, link] of Array.from(replyLinks)) {
        if (link.connection === conn) replyLinks.delete(addr);
    }
    releaseLinks(l => l.connection === conn);
}
container.on('disconnected', connectionGone);
container.on('connection_close', connectionGone);
container.on('error', err => log('error:', err && err.message));

// ---- control API ----------------------------------------------------------

function readJSON(req) {
    return new Promise((resolve, reject) => {
        let s = '';
        req.setEncoding('utf8');
        req.on('data', c => { s += c; });
        req.on('end', () => {
            try { resolve(s ? JSON.parse(s) : {}); } catch (err) { reject(err); }
        });
        req.on('error', reject);
    });
}

function stats(e) {
    const now = Date.now();
    const locked = e.messages.filter(m => m.lock).length;
    const waiting = e.messages.filter(m => !m.lock && m.enqueuedAt > now).length;
    return Object.assign({name: e.name, active: e.messages.length - locked - waiting, locked, waiting}, e.counters);
}

const control = http.createServer(async (req, res) => {
    const send = (status, body) => {
        res.writeHead(status, {'Content-Type': 'application/json'});
        res.end(JSON.stringify(body === undefined ? {} : body));
    };
    try {
        const m = /^\/entities\/([^/]+)(\/faults)?$/.exec(req.url);
        if (!m) return send(404, {error: 'no such resource'});
        const name = decodeURIComponent(m[1]);
        const key = name.toLowerCase();
        if (m[2]) {
            const e = entities.get(key);
            if (!e) return send(404, {error: 'no entity ' + name});
            const f = await readJSON(req);
            e.faults.push({count: f.count || 1, condition: f.condition, description: f.description});
            return send(200);
        }
        switch (req.method) {
        case 'PUT':
            entities.set(key, newEntity(name, await readJSON(req)));
            return send(201);
        case 'DELETE':
            entities.delete(key);
            return send(200);
        case 'GET': {
            const e = entities.get(key);
            return e ? send(200, stats(e)) : send(404, {error: 'no entity ' + name});
        }
        }
        send(405, {error: 'method not allowed'});
    } catch (err) {
        send(500, {error: err.message});
    }
});

const amqp = container.listen({port: 0, host: '127.0.0.1'});
let ready = 0;
function announce() {
    if (++ready < 2) return;
    process.stdout.write(JSON.stringify({amqp: amqp.address().port, control: control.address().port}) + '\n');
}
amqp.on('listening', announce);
control.listen(0, '127.0.0.1', announce);

process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
