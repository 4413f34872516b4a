// Live Stats page of lb (S-OB1..3). Vanilla JS, no build step, no external resources.
// Polls GET /api/v1/stats/live every second, renders the vServices (lists and their active
// tier) and the Backend Services (health, Maintenance/Backup markers, counters, "used in"),
// toggles Maintenance through the API, and shows a backend's health check transitions with
// a canvas chart of check durations.
(() => {
  "use strict";

  const REFRESH_MS = 1000;
  const REQUEST_TIMEOUT_MS = 4000;
  const TOKEN_KEY = "lb.apiToken";
  // How long a toggle button stays disabled waiting for the live data to show the change.
  const TOGGLE_SETTLE_MS = 5000;

  const state = {
    selected: null, // backend whose transitions are shown
    pending: new Map(), // backend name -> {want: bool, until: ms}
    errors: { refresh: null, transitions: null, action: null },
    actionErrorTimer: null,
  };

  const $ = (id) => document.getElementById(id);

  // ----- small DOM helpers (text only: never innerHTML with API data) --------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function setText(node, text) {
    const t = String(text);
    if (node.textContent !== t) node.textContent = t;
  }

  /** Replaces a node's children only when their rendered text would change. */
  function setChildren(node, children) {
    const probe = el("div", {}, ...children);
    if (probe.innerHTML !== node.innerHTML) node.replaceChildren(...probe.childNodes);
  }

  // ----- formatting -----------------------------------------------------------------------

  function fmtNum(n) {
    if (n === undefined || n === null || Number.isNaN(Number(n))) return "–";
    return Number(n).toLocaleString("en-US");
  }

  function fmtBytes(n) {
    if (n === undefined || n === null || Number.isNaN(Number(n))) return "–";
    let v = Number(n);
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return i === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[i]}`;
  }

  function fmtTime(ms) {
    if (!ms && ms !== 0) return "–";
    const d = new Date(Number(ms));
    const pad = (x, w = 2) => String(x).padStart(w, "0");
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }

  function fmtDateTime(ms) {
    const d = new Date(Number(ms));
    const pad = (x) => String(x).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${fmtTime(ms)}`;
  }

  /** Whole milliseconds from the API: a check faster than 1 ms reads "< 1 ms", not "0 ms". */
  function fmtCheckMs(ms) {
    if (ms === undefined || ms === null) return "–";
    return Number(ms) < 1 ? "< 1 ms" : `${fmtNum(ms)} ms`;
  }

  // address:port as an operator writes it, IPv6 in brackets ([2001:db8::1]:80).
  function hostPort(address, port) {
    const a = address ?? "?";
    const p = port ?? "?";
    return String(a).includes(":") ? `[${a}]:${p}` : `${a}:${p}`;
  }

  function fmtPorts(ports) {
    if (ports === undefined || ports === null) return "any";
    if (!Array.isArray(ports)) return String(ports);
    if (ports.length === 0) return "any";
    return ports
      .map((p) => (p && typeof p === "object" ? `${p.start ?? p.from}-${p.end ?? p.to}` : String(p)))
      .join(",");
  }

  function fmtUsedIn(u) {
    if (typeof u === "string") return u;
    if (!u || typeof u !== "object") return String(u);
    const vs = u.vservice ?? u.name ?? "?";
    return u.list ? `${vs} (${u.list})` : vs;
  }

  function tierClass(tier) {
    const t = String(tier || "none").toLowerCase();
    if (t === "mains") return "mains";
    if (t.startsWith("backup")) return "backup";
    return "none";
  }

  function healthClass(h) {
    const t = String(h || "").toLowerCase();
    return ["ok", "error", "preparing"].includes(t) ? t : "unknown";
  }

  // ----- API ------------------------------------------------------------------------------

  function authHeaders(extra) {
    const h = Object.assign({ Accept: "application/json" }, extra || {});
    const token = localStorage.getItem(TOKEN_KEY);
    if (token) h.Authorization = `Bearer ${token}`;
    return h;
  }

  async function api(path, opts = {}) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), REQUEST_TIMEOUT_MS);
    const method = opts.method || "GET";
    let res;
    try {
      res = await fetch(path, {
        method,
        body: opts.body,
        headers: authHeaders(opts.headers),
        cache: "no-store",
        signal: ctl.signal,
      });
    } catch (e) {
      throw new Error(`${method} ${path}: ${e.name === "AbortError" ? "timed out" : e.message}`);
    } finally {
      clearTimeout(timer);
    }
    const text = await res.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (_) {
      body = null;
    }
    if (!res.ok) {
      const why = body && body.error ? body.error : text || res.statusText;
      throw new Error(`${method} ${path}: HTTP ${res.status}: ${why}`);
    }
    return body;
  }

  // ----- error banner ---------------------------------------------------------------------

  function renderBanner() {
    const msgs = Object.values(state.errors).filter(Boolean);
    const banner = $("error-banner");
    if (msgs.length === 0) {
      banner.hidden = true;
      banner.textContent = "";
    } else {
      banner.hidden = false;
      setText(banner, `API error: ${msgs.join(" — ")}`);
    }
  }

  function setActionError(msg) {
    state.errors.action = msg;
    clearTimeout(state.actionErrorTimer);
    if (msg) {
      state.actionErrorTimer = setTimeout(() => {
        state.errors.action = null;
        renderBanner();
      }, 10000);
    }
    renderBanner();
  }

  // ----- vServices ------------------------------------------------------------------------

  function counterItems(c) {
    if (!c || typeof c !== "object") return [el("span", { class: "empty", text: "no counters yet" })];
    const labels = {
      requests: ["requests", fmtNum],
      current: ["current", fmtNum],
      bytes_in: ["bytes in", fmtBytes],
      bytes_out: ["bytes out", fmtBytes],
      unavailable: ["unavailable", fmtNum],
      packets: ["packets", fmtNum],
      bytes: ["bytes", fmtBytes],
      new_flows: ["new flows", fmtNum],
      drops: ["drops", fmtNum],
    };
    const order = Object.keys(labels);
    const rank = (k) => (order.includes(k) ? order.indexOf(k) : order.length);
    const entries = Object.entries(c).sort((a, b) => rank(a[0]) - rank(b[0]));
    return entries.map(([k, v]) => {
      const [label, f] = labels[k] || [k.replace(/_/g, " "), fmtNum];
      return el("span", { "data-testid": `counter-${k}` }, `${label} `, el("b", { text: f(v) }));
    });
  }

  function renderVService(vs) {
    const name = vs.name;
    const rows = (vs.lists || []).map((list) => {
      const members = (list.members || []).map((m) =>
        el(
          "span",
          {
            class: `member ${m.state || ""}`,
            "data-testid": `member-${name}-${list.name}-${m.name}`,
            title: `${m.name}: ${m.role || "main"}, ${m.state || "?"}`,
          },
          m.name,
          m.role === "backup" ? el("span", { class: "role", text: " (backup)" }) : null,
          el("span", { class: "role", text: ` ${m.state || ""}` }),
        ),
      );
      return el(
        "tr",
        { "data-testid": `list-${name}-${list.name}` },
        el("td", { text: list.name }),
        el(
          "td",
          {},
          el("span", {
            class: `tier ${tierClass(list.tier)}`,
            "data-testid": `tier-${name}-${list.name}`,
            text: list.tier || "none",
          }),
        ),
        el("td", {}, ...(members.length ? members : [el("span", { class: "empty", text: "no members" })])),
      );
    });
    return el(
      "div",
      { class: "vs", "data-testid": `vservice-${name}` },
      el(
        "div",
        { class: "vs-head" },
        el("span", { class: "name", text: name }),
        el("span", { class: "kind", text: vs.kind || "?" }),
        el("span", { class: "addr", text: hostPort(vs.address, fmtPorts(vs.ports)) }),
        vs.address6 ? el("span", { class: "addr", text: hostPort(vs.address6, fmtPorts(vs.ports)) }) : null,
      ),
      el("div", { class: "counters" }, ...counterItems(vs.counters)),
      el(
        "table",
        { class: "grid" },
        el("thead", {}, el("tr", {}, el("th", { text: "List" }), el("th", { text: "Active tier" }), el("th", { text: "Members" }))),
        el("tbody", {}, ...rows),
      ),
    );
  }

  function renderVServices(list) {
    const box = $("vservices");
    if (!list || list.length === 0) {
      setChildren(box, [el("p", { class: "empty", text: "No vServices configured." })]);
      return;
    }
    setChildren(box, [el("div", { class: "vservices" }, ...list.map(renderVService))]);
  }

  // ----- Backend Services -----------------------------------------------------------------

  function buildBackendRow(name) {
    const cells = {};
    // Counter cells get test ids ("total-b1", "bytes-in-b1", "used-in-b1"); the health and
    // server cells hold badges that carry their own.
    const counted = ["current", "total", "bytes_in", "bytes_out", "used_in"];
    const td = (key, cls) =>
      (cells[key] = el("td", {
        class: cls,
        "data-testid": counted.includes(key) ? `${key.replace("_", "-")}-${name}` : null,
      }));
    const link = el("a", {
      class: "backend-link",
      href: `#transitions/${encodeURIComponent(name)}`,
      "data-testid": `backend-link-${name}`,
      text: name,
    });
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      openTransitions(name);
    });
    const toggle = el("button", { type: "button", class: "toggle", "data-testid": `maint-toggle-${name}` });
    toggle.addEventListener("click", () => toggleMaintenance(name, toggle));
    const row = el(
      "tr",
      { "data-testid": `backend-row-${name}`, "data-name": name },
      el("td", {}, link),
      td("address", "mono"),
      td("weight", "num"),
      td("health"),
      td("markers"),
      td("server"),
      td("current", "num"),
      td("total", "num"),
      td("bytes_in", "num"),
      td("bytes_out", "num"),
      td("used_in"),
      el("td", {}, toggle),
    );
    row._cells = cells;
    row._toggle = toggle;
    return row;
  }

  function updateBackendRow(row, b) {
    const c = row._cells;
    const name = b.name;
    setText(
      c.address,
      b.address6 ? `${hostPort(b.address, b.port)} ${hostPort(b.address6, b.port)}` : hostPort(b.address, b.port),
    );
    setText(c.weight, fmtNum(b.weight));
    setChildren(c.health, [
      el("span", {
        class: `badge ${healthClass(b.health)}`,
        "data-testid": `health-${name}`,
        "data-health": b.health,
        text: b.health || "?",
      }),
      b.checked === false ? el("span", { class: "role", text: " (not checked)" }) : null,
      // A dual-stack service's IPv6 address is checked on its own.
      b.health6
        ? el("span", {
            class: `badge ${healthClass(b.health6)}`,
            "data-testid": `health6-${name}`,
            title: "IPv6 address",
            text: `IPv6 ${b.health6}`,
          })
        : null,
    ]);
    setChildren(c.markers, [
      b.maintenance ? el("span", { class: "maint", "data-testid": `maint-${name}`, text: "Maintenance" }) : null,
      b.backup ? el("span", { class: "backup-marker", "data-testid": `backup-${name}`, text: "Backup" }) : null,
    ]);
    setChildren(c.server, [
      el("span", {
        class: `badge ${healthClass(b.server === "Failed" ? "error" : b.server)}`,
        "data-testid": `server-${name}`,
        text: b.server || "?",
      }),
    ]);
    // L7 backends report sessions and requests; Network backends XDP flows and bytes.
    setText(c.current, fmtNum(b.current_sessions));
    setText(c.total, fmtNum(b.total ?? b.new_flows));
    setText(c.bytes_in, fmtBytes(b.bytes_in ?? b.bytes));
    setText(c.bytes_out, fmtBytes(b.bytes_out));
    const used = (b.used_in || []).map(fmtUsedIn);
    setText(c.used_in, used.length ? used.join(", ") : "–");
    row.classList.toggle("in-maint", !!b.maintenance);
    row.classList.toggle("selected", state.selected === name);

    const pending = state.pending.get(name);
    if (pending && (pending.want === !!b.maintenance || Date.now() > pending.until)) {
      state.pending.delete(name);
    }
    const t = row._toggle;
    t.disabled = state.pending.has(name);
    t.classList.toggle("on", !!b.maintenance);
    t.setAttribute("aria-pressed", b.maintenance ? "true" : "false");
    t.dataset.maintenance = b.maintenance ? "on" : "off";
    t.title = b.maintenance ? "Return this Backend Service to distribution" : "Stop new traffic to this Backend Service";
    setText(t, b.maintenance ? "Maintenance off" : "Maintenance on");
  }

  function renderBackends(list) {
    const tbody = $("backends").tBodies[0];
    const existing = new Map([...tbody.rows].map((r) => [r.dataset.name, r]));
    const wanted = (list || []).map((b) => {
      const row = existing.get(b.name) || buildBackendRow(b.name);
      existing.delete(b.name);
      updateBackendRow(row, b);
      return row;
    });
    for (const stale of existing.values()) stale.remove();
    wanted.forEach((row, i) => {
      if (tbody.rows[i] !== row) tbody.insertBefore(row, tbody.rows[i] || null);
    });
    if (wanted.length === 0 && !tbody.querySelector(".empty")) {
      tbody.append(el("tr", { class: "empty" }, el("td", { colspan: 12, text: "No Backend Services." })));
    } else if (wanted.length > 0) {
      tbody.querySelectorAll("tr.empty").forEach((r) => r.remove());
    }
  }

  async function toggleMaintenance(name, button) {
    const on = button.dataset.maintenance !== "on";
    state.pending.set(name, { want: on, until: Date.now() + TOGGLE_SETTLE_MS });
    button.disabled = true;
    try {
      await api(`/api/v1/backends/${encodeURIComponent(name)}/maintenance`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ on }),
      });
      setActionError(null);
    } catch (e) {
      state.pending.delete(name);
      setActionError(`maintenance ${on ? "on" : "off"} for ${name} failed: ${e.message}`);
    }
    await refresh();
  }

  // ----- transitions view -----------------------------------------------------------------

  function openTransitions(name) {
    state.selected = name;
    $("transitions").hidden = false;
    setText($("transitions-name"), name);
    history.replaceState(null, "", `#transitions/${encodeURIComponent(name)}`);
    for (const r of $("backends").tBodies[0].rows) r.classList.toggle("selected", r.dataset.name === name);
    loadTransitions();
    $("transitions").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  function closeTransitions() {
    state.selected = null;
    state.errors.transitions = null;
    $("transitions").hidden = true;
    history.replaceState(null, "", location.pathname);
    renderBanner();
  }

  async function loadTransitions() {
    const name = state.selected;
    if (!name) return;
    try {
      const data = await api(`/api/v1/backends/${encodeURIComponent(name)}/transitions`);
      if (state.selected !== name) return;
      state.errors.transitions = null;
      renderTransitions(data || {});
    } catch (e) {
      state.errors.transitions = e.message;
    }
    renderBanner();
  }

  function renderTransitions(data) {
    const transitions = data.transitions || [];
    const checks = data.checks || [];
    const tbody = $("transitions-table").tBodies[0];
    const rows = transitions
      .slice()
      .sort((a, b) => b.at_unix_ms - a.at_unix_ms)
      .map((t) =>
        el(
          "tr",
          { "data-testid": "transition-row" },
          el("td", { class: "mono", text: fmtDateTime(t.at_unix_ms) }),
          el("td", {}, el("span", { class: `badge ${healthClass(t.from)}`, text: t.from ?? "–" })),
          el("td", {}, el("span", { class: `badge ${healthClass(t.to)}`, text: t.to ?? "–" })),
          el("td", { text: t.reason ?? "" }),
          el("td", { class: "num", text: fmtCheckMs(t.check_ms) }),
        ),
      );
    if (rows.length === 0) {
      rows.push(el("tr", {}, el("td", { colspan: 5, class: "empty", text: "No transitions recorded." })));
    }
    setChildren(tbody, rows);
    drawChart($("checks-chart"), checks, transitions);
  }

  /** A "nice" step (1, 2 or 5 times a power of ten) giving about `count` ticks over `span`. */
  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const pow = 10 ** Math.floor(Math.log10(raw));
    const f = raw / pow;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * pow;
  }

  /** Plots check durations over time: axes, a ms scale, passed checks green, failed red. */
  function drawChart(canvas, checks, transitions) {
    const dpr = window.devicePixelRatio || 1;
    const cssW = canvas.clientWidth || 900;
    const cssH = canvas.clientHeight || 260;
    if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
      canvas.width = Math.round(cssW * dpr);
      canvas.height = Math.round(cssH * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, cssW, cssH);

    const m = { left: 76, right: 16, top: 14, bottom: 34 };
    const w = cssW - m.left - m.right;
    const h = cssH - m.top - m.bottom;
    const pts = checks
      .filter((c) => Number.isFinite(Number(c.at_unix_ms)))
      .map((c) => ({ t: Number(c.at_unix_ms), d: Math.max(0, Number(c.duration_ms) || 0), ok: !!c.ok }))
      .sort((a, b) => a.t - b.t);

    let t0 = pts.length ? pts[0].t : Date.now() - 60000;
    let t1 = pts.length ? pts[pts.length - 1].t : Date.now();
    if (t1 - t0 < 10000) {
      const mid = (t0 + t1) / 2;
      t0 = mid - 5000;
      t1 = mid + 5000;
    }
    const maxD = pts.reduce((acc, p) => Math.max(acc, p.d), 0);
    const yStep = niceStep(Math.max(maxD * 1.15, 1), 5);
    const yMax = Math.max(yStep, Math.ceil((Math.max(maxD * 1.15, 1)) / yStep) * yStep);
    const x = (t) => m.left + ((t - t0) / (t1 - t0)) * w;
    const y = (d) => m.top + h - (d / yMax) * h;

    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    // Grid and the ms scale.
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let v = 0; v <= yMax + yStep / 2; v += yStep) {
      const yy = Math.round(y(v)) + 0.5;
      ctx.strokeStyle = v === 0 ? "#2b3a4f" : "#e3e7ec";
      ctx.beginPath();
      ctx.moveTo(m.left, yy);
      ctx.lineTo(m.left + w, yy);
      ctx.stroke();
      ctx.fillStyle = "#4b5563";
      const label = yStep < 1 ? v.toFixed(String(yStep).split(".")[1]?.length || 1) : String(Math.round(v));
      ctx.fillText(`${label} ms`, m.left - 6, yy);
    }
    // Time axis.
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const xStep = niceStep((t1 - t0) / 1000, 6) * 1000;
    for (let t = Math.ceil(t0 / xStep) * xStep; t <= t1; t += xStep) {
      const xx = Math.round(x(t)) + 0.5;
      ctx.strokeStyle = "#2b3a4f";
      ctx.beginPath();
      ctx.moveTo(xx, m.top + h);
      ctx.lineTo(xx, m.top + h + 4);
      ctx.stroke();
      ctx.fillStyle = "#4b5563";
      ctx.fillText(fmtTime(t).slice(0, 8), xx, m.top + h + 6);
    }
    ctx.strokeStyle = "#2b3a4f";
    ctx.beginPath();
    ctx.moveTo(m.left + 0.5, m.top);
    ctx.lineTo(m.left + 0.5, m.top + h);
    ctx.stroke();
    ctx.save();
    ctx.translate(11, m.top + h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillText("check duration", 0, 0);
    ctx.restore();

    // State transitions as vertical markers.
    ctx.save();
    ctx.beginPath();
    ctx.rect(m.left, m.top, w, h);
    ctx.clip();
    for (const tr of transitions || []) {
      const t = Number(tr.at_unix_ms);
      if (!(t >= t0 && t <= t1)) continue;
      const xx = Math.round(x(t)) + 0.5;
      ctx.strokeStyle = "#7c3aed";
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      ctx.moveTo(xx, m.top);
      ctx.lineTo(xx, m.top + h);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = "#7c3aed";
      ctx.textAlign = "left";
      ctx.textBaseline = "top";
      ctx.fillText(`→ ${tr.to}`, xx + 3, m.top + 2);
    }
    // Durations: a line through the checks, then one dot per check.
    if (pts.length > 1) {
      ctx.strokeStyle = "rgba(31, 95, 191, 0.55)";
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      pts.forEach((p, i) => (i === 0 ? ctx.moveTo(x(p.t), y(p.d)) : ctx.lineTo(x(p.t), y(p.d))));
      ctx.stroke();
    }
    for (const p of pts) {
      ctx.fillStyle = p.ok ? "#1f9d55" : "#d64545";
      ctx.beginPath();
      ctx.arc(x(p.t), y(p.d), p.ok ? 3 : 4.5, 0, Math.PI * 2);
      ctx.fill();
    }
    ctx.restore();
    if (pts.length === 0) {
      ctx.fillStyle = "#6b7280";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("No checks recorded yet", m.left + w / 2, m.top + h / 2);
    }
    canvas.dataset.points = String(pts.length);
    canvas.dataset.failed = String(pts.filter((p) => !p.ok).length);
  }

  // ----- global sites (S-GS4) -------------------------------------------------------------

  function siteClass(state) {
    if (state === "OK") return "badge ok";
    if (state === "No Services") return "badge error";
    return "badge preparing";
  }

  function renderGslb(data) {
    const sites = (data && data.sites) || [];
    $("gslb").hidden = sites.length === 0;
    if (sites.length === 0) return;
    const rows = sites.map((s) =>
      el("tr", { "data-testid": `gslb-site-${s.key.record}-${s.key.site}` },
        el("td", { text: s.key.dns_vservice }),
        el("td", { text: s.key.record }),
        el("td", { text: s.key.site }),
        el("td", { text: s.vservice }),
        el("td", { text: s.standby ? "standby" : "active" }),
        el("td", {}, el("span", { class: siteClass(s.state), text: s.state })),
        el("td", { text: s.reason || "" }),
        el("td", { class: "num", text: fmtNum(s.sessions) }),
        el("td", { text: s.since_unix_ms ? fmtDateTime(s.since_unix_ms) : "–" })));
    setChildren($("gslb-sites").tBodies[0], rows);
    const recent = ((data && data.transitions) || []).slice(-10).reverse();
    setChildren($("gslb-transitions").tBodies[0], recent.map((t) =>
      el("tr", {},
        el("td", { text: fmtDateTime(t.at_unix_ms) }),
        el("td", { text: `${t.key.record} @ ${t.key.site}` }),
        el("td", { text: t.from }),
        el("td", { text: t.to }),
        el("td", { text: t.reason || "" }))));
  }

  // ----- refresh loop ---------------------------------------------------------------------

  async function refresh() {
    try {
      const live = await api("/api/v1/stats/live");
      state.errors.refresh = null;
      renderVServices(live.vservices);
      renderBackends(live.backends);
      renderGslb(await api("/api/v1/gslb"));
      const now = live.generated_unix_ms || Date.now();
      const stamp = $("last-refresh");
      setText(stamp, fmtTime(now).slice(0, 8));
      stamp.setAttribute("datetime", new Date(Number(now)).toISOString());
      stamp.dataset.unixMs = String(now);
    } catch (e) {
      state.errors.refresh = e.message;
    }
    renderBanner();
    if (state.selected) await loadTransitions();
  }

  async function loop() {
    try {
      await refresh();
    } finally {
      setTimeout(loop, REFRESH_MS);
    }
  }

  function init() {
    const token = $("token");
    token.value = localStorage.getItem(TOKEN_KEY) || "";
    token.addEventListener("change", () => {
      const v = token.value.trim();
      if (v) localStorage.setItem(TOKEN_KEY, v);
      else localStorage.removeItem(TOKEN_KEY);
      refresh();
    });
    $("transitions-close").addEventListener("click", closeTransitions);
    const m = /^#transitions\/(.+)$/.exec(location.hash);
    if (m) openTransitions(decodeURIComponent(m[1]));
    window.addEventListener("resize", () => state.selected && loadTransitions());
    loop();
  }

  init();
})();
