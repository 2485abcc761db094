// The Koord-Queue dashboard: draws api/overview (streamed from api/stream) and asks
// api/explain/NAMESPACE/NAME why a unit waits. Plain DOM, no framework, nothing fetched
// from outside the controller. Every text is set with textContent: names and messages
// come from users' objects and are never parsed as HTML.
"use strict";

(() => {
  const { formatQuantity, formatAge } = window.koordQueue;

  // h("td", {class: "x"}, "text", child): an element with attributes and children.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "style") Object.assign(el.style, value);
      else el.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  // GPUs first: they are what people queue for.
  function resourceOrder(a, b) {
    const rank = (r) => (r.includes("gpu") ? 0 : r === "cpu" ? 1 : r === "memory" ? 2 : 3);
    return rank(a) - rank(b) || a.localeCompare(b);
  }

  function pct(part, whole) {
    return `${Math.max(0, Math.min(100, (100 * part) / whole)).toFixed(2)}%`;
  }

  function resourceBar(quotaName, resource, amounts, capacity) {
    const { min, max, used, runtime, demand } = amounts;
    const track = max ?? capacity?.[resource] ?? Math.max(used, min, runtime ?? 0, demand, 1);
    const scale = Math.max(track, used, 1);
    const parts = [`used ${formatQuantity(used)}`, `min ${formatQuantity(min)}`,
      `runtime share ${runtime === null ? "-" : formatQuantity(runtime)}`,
      max === null ? "no max" : `max ${formatQuantity(max)}`];
    if (demand > used) parts.push(`wants ${formatQuantity(demand)}`);
    const label = `${quotaName}, ${resource}: ${parts.join(", ")}`;
    const over = runtime !== null && used > runtime;
    return h("li", { class: "resource" },
      h("span", { class: "rname" }, resource),
      h("div", { class: "bar", role: "img", "aria-label": label, title: label, "data-resource": resource },
        runtime !== null ? h("span", { class: "share", style: { width: pct(runtime, scale) } }) : null,
        h("span", { class: "used", style: { width: pct(over ? runtime : used, scale) } }),
        over ? h("span", { class: "over", style: { left: pct(runtime, scale), width: pct(used - runtime, scale) } }) : null,
        min > 0 ? h("span", { class: "min", style: { left: pct(min, scale) } }) : null),
      h("span", { class: "figures", "aria-hidden": "true" }, parts.join(" · ")));
  }

  // Decayed usage per quota and resource, sampled as the overview streams in: the chart
  // of each quota's recent history (kept in the page only, the last SAMPLES of it).
  const SAMPLES = 120;
  const decayedSeen = new Map();

  function sparkline(points, label) {
    const width = 120, height = 24;
    const top = Math.max(...points, 1e-9);
    const step = points.length > 1 ? width / (points.length - 1) : 0;
    const path = points.map((v, i) => `${(i * step).toFixed(1)},${(height - (height * v) / top).toFixed(1)}`).join(" ");
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", path);
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", "currentColor");
    svg.append(line);
    return svg;
  }

  function historyItems(quota) {
    const history = quota.history;
    if (!history) return [];
    const items = [];
    for (const [resource, hours] of Object.entries(history.decayed || {}).sort(([a], [b]) => resourceOrder(a, b))) {
      const key = `${quota.name}/${resource}`;
      const seen = decayedSeen.get(key) || [];
      seen.push(hours);
      if (seen.length > SAMPLES) seen.shift();
      decayedSeen.set(key, seen);
      const label = `${quota.name}, ${resource}: decayed usage ${hours.toFixed(1)} resource-hours`;
      items.push(h("li", { class: "history", "data-history": resource },
        h("span", { class: "rname" }, `${resource} history`), sparkline(seen, label),
        h("span", { class: "figures" }, `decayed usage ${hours.toFixed(1)} h`)));
    }
    for (const [resource, use] of Object.entries(history.budgets || {}).sort(([a], [b]) => resourceOrder(a, b))) {
      const label = `${quota.name}, ${resource}: budget ${use.used.toFixed(1)} of ${use.amount} resource-hours ` +
        `in ${use.window / 3600} h`;
      items.push(h("li", { class: "resource", "data-budget": resource },
        h("span", { class: "rname" }, `${resource} budget`),
        h("div", { class: "bar", role: "img", "aria-label": label, title: label },
          h("span", { class: use.used > use.amount ? "over" : "used", style: { width: pct(use.used, use.amount) } })),
        h("span", { class: "figures", "aria-hidden": "true" },
          `${use.used.toFixed(1)} / ${use.amount} h in ${use.window / 3600} h`)));
    }
    return items;
  }

  function quotaItem(quota, children, capacity) {
    const resources = Object.keys(quota.resources).sort(resourceOrder);
    const headingId = `quota-${quota.name}`;
    const notes = [];
    if (quota.policy) notes.push(`${quota.policy} policy`);
    if (quota.namespace) notes.push(`namespace ${quota.namespace}`);
    if (quota.is_parent) notes.push("parent quota");
    return h("li", {},
      h("article", { class: quota.valid ? "quota" : "quota invalid", "aria-labelledby": headingId, "data-quota": quota.name },
        h("h3", { id: headingId }, quota.name, h("span", { class: "muted" }, notes.length ? ` (${notes.join(", ")})` : "")),
        quota.valid ? null : h("p", { class: "warning" }, `Not used: ${quota.reason}`),
        h("ul", { class: "resources", "aria-label": `Resources of ${quota.name}` },
          resources.map((r) => resourceBar(quota.name, r, quota.resources[r], capacity)), historyItems(quota))),
      (children.get(quota.name) || []).length
        ? h("ul", { class: "tree" }, children.get(quota.name).map((child) => quotaItem(child, children, capacity)))
        : null);
  }

  function renderQuotas(view) {
    const names = new Set(view.quotas.map((q) => q.name));
    const children = new Map();
    const roots = [];
    for (const quota of [...view.quotas].sort((a, b) => a.name.localeCompare(b.name))) {
      if (quota.parent && names.has(quota.parent)) {
        if (!children.has(quota.parent)) children.set(quota.parent, []);
        children.get(quota.parent).push(quota);
      } else {
        roots.push(quota);
      }
    }
    const capacity = view.capacity;
    document.getElementById("capacity").textContent = capacity
      ? `Cluster capacity: ${Object.keys(capacity).sort(resourceOrder).map((r) => `${r} ${formatQuantity(capacity[r])}`).join(", ")}.`
      : "Cluster capacity: unknown (no nodes reported); only quotas limit admission.";
    const target = document.getElementById("quotas");
    if (!roots.length) {
      target.replaceChildren(h("p", {}, "No ElasticQuota yet."));
      return;
    }
    target.replaceChildren(h("ul", { class: "tree top", "aria-label": "Quota tree" },
      roots.map((quota) => quotaItem(quota, children, capacity))));
  }

  function unitButton(unit, keyPrefix) {
    return h("button", { type: "button", class: "unit", "data-unit": unit, "data-key": `${keyPrefix}:${unit}`,
      "aria-haspopup": "dialog" }, unit);
  }

  function renderQueues(view) {
    const target = document.getElementById("queues");
    if (!view.queues.length) {
      target.replaceChildren(h("p", {}, "No queues yet."));
      return;
    }
    const queues = [...view.queues].sort((a, b) => (b.pending_count - a.pending_count) || a.key.localeCompare(b.key));
    target.replaceChildren(...queues.map((queue) => {
      const title = `${queue.key}${queue.quota ? `, quota ${queue.quota}` : ""}: ${queue.pending_count} pending`;
      if (!queue.pending_count) {
        return h("article", { class: "queue empty", "data-queue": queue.key }, h("h3", {}, title));
      }
      const more = queue.pending_count - queue.pending.length;
      return h("article", { class: "queue", "data-queue": queue.key },
        h("table", {},
          h("caption", {}, title),
          h("thead", {}, h("tr", {},
            h("th", { scope: "col" }, "Position"), h("th", { scope: "col" }, "QueueUnit"),
            h("th", { scope: "col" }, "Job"), h("th", { scope: "col" }, "Priority"),
            h("th", { scope: "col" }, "Waiting"), h("th", { scope: "col" }, "Expected start"),
            h("th", { scope: "col" }, "Why it waits"))),
          h("tbody", {}, queue.pending.map((item) => h("tr", { "data-unit": item.unit },
            h("td", { class: "num" }, item.position), h("td", {}, unitButton(item.unit, "queue")),
            h("td", {}, item.job), h("td", { class: "num" }, item.priority),
            h("td", { class: "num" }, formatAge(item.age)),
            h("td", { class: "forecast", title: item.forecast ?? "no forecast yet" }, formatStart(item, view.time)),
            h("td", { class: "message" }, item.message))))),
        timeline(queue, view.time),
        more > 0 ? h("p", { class: "muted" }, `… and ${more} more.`) : null);
    }));
  }

  // A forecast's span, as roughly as it is known: "25m", "1h10m", "3d".
  function formatSpan(seconds) {
    const m = Math.round(Math.max(0, seconds) / 60);
    if (m < 120) return `${m}m`;
    if (m < 48 * 60) return `${Math.floor(m / 60)}h${m % 60 ? `${m % 60}m` : ""}`;
    return `${Math.round(m / 1440)}d`;
  }

  // The forecast of a pending unit (controller/forecaster.py): "in ~25m (10m–1h10m)", "never", "later".
  function formatStart(item, now) {
    if (!("startsAt" in item)) return "–";
    if (item.startsAt === null) return item.basis === "never-fits" ? "never" : "later";
    const [low, high] = item.rangeAt ?? [null, null];
    const span = low !== null && high !== null
      ? ` (${formatSpan(Math.max(0, low - now))}–${formatSpan(Math.max(0, high - now))})` : "";
    return item.startsAt - now < 60 ? `now${span}` : `in ~${formatSpan(item.startsAt - now)}${span}`;
  }

  // A small timeline of the quota's queue: now on the left; above, each running unit's expected
  // end; below, each listed unit's expected start (a mark; its range a band).
  function timeline(queue, now) {
    const items = queue.pending.filter((item) => item.startsAt !== undefined && item.startsAt !== null);
    const running = queue.running || [];
    if (!items.length) return null;
    const end = Math.max(...items.map((item) => (item.rangeAt && item.rangeAt[1]) || item.startsAt),
      ...running.map((r) => r.until), now + 60);
    const at = (t) => `${(100 * Math.max(0, t - now) / (end - now)).toFixed(2)}%`;
    const ends = running.map((r) => `${r.unit} ends in ~${formatSpan(r.until - now)}`);
    return h("figure", { class: "timeline", "data-queue": queue.key },
      h("figcaption", {}, `Forecast over the next ${formatSpan(end - now)}: ${running.length} running `
        + `(their expected ends), ${items.length} to start`),
      h("div", { class: "track running", role: "img", "aria-label": ends.join("; ") || "nothing running" },
        ...running.map((r) => h("span", { class: "run", "data-unit": r.unit, title: `${r.unit}: expected to end in `
          + `~${formatSpan(r.until - now)}`, style: { width: at(r.until) } }))),
      h("div", { class: "track", role: "img",
        "aria-label": items.map((item) => `${item.unit} ${formatStart(item, now)}`).join("; ") },
        ...items.map((item) => h("span", { class: "band", "data-unit": item.unit, style: {
          left: at(item.rangeAt?.[0] ?? item.startsAt),
          width: `calc(${at(item.rangeAt?.[1] ?? item.startsAt)} - ${at(item.rangeAt?.[0] ?? item.startsAt)})` } })),
        ...items.map((item) => h("span", { class: "mark", "data-unit": item.unit, title: `${item.unit}: ${item.forecast}`,
          style: { left: at(item.startsAt) } }))));
  }

  function renderRecent(view) {
    const target = document.getElementById("recent");
    if (!view.recent.length) {
      target.replaceChildren(h("p", {}, "Nothing decided since this controller started leading."));
      return;
    }
    target.replaceChildren(h("table", {},
      h("caption", { class: "visually-hidden" }, "Recent decisions, newest first"),
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "When"), h("th", { scope: "col" }, "Decision"), h("th", { scope: "col" }, "QueueUnit"),
        h("th", { scope: "col" }, "Quota"), h("th", { scope: "col" }, "Message"))),
      h("tbody", {}, view.recent.map((item, index) => h("tr", { "data-what": item.what, "data-unit": item.unit },
        h("td", { class: "num" }, `${formatAge(view.time - item.time)} ago`),
        h("td", {}, h("span", { class: `badge ${item.what.replace(/\s+/g, "-")}` }, item.what)),
        h("td", {}, unitButton(item.unit, `recent-${index}`)),
        h("td", {}, item.quota ?? "-"), h("td", { class: "message" }, item.message))))));
  }

  function pendingCount(view) {
    return view.queues.reduce((sum, queue) => sum + queue.pending_count, 0);
  }

  // --- the explanation dialog ---------------------------------------------------------

  const dialog = document.getElementById("explain");
  let explained = null; // the unit the dialog shows
  let opener = null; // data-key of the button that opened it, to give focus back

  function explanation(why) {
    const title = h("h3", {}, `${why.job}: `, h("span", { class: "phase" }, why.phase));
    if (why.admitted) {
      return [title, h("p", {}, `It holds quota ${why.quota}: `, h("span", { id: "explain-why" }, why.message))];
    }
    const rows = [h("dt", {}, "Why"), h("dd", { id: "explain-why" }, why.message || "-")];
    if (why.forecast) {
      rows.push(h("dt", {}, "When"), h("dd", { id: "explain-when" }, why.forecast));
    }
    if (why.queue) {
      const where = why.position ? `position ${why.position}` : "not in line (backing off or parked)";
      rows.push(h("dt", {}, "Queue"), h("dd", {}, `${why.queue}, quota ${why.quota}, ${where}, priority ${why.priority}`));
    }
    const asks = Object.keys(why.request || {}).sort();
    if (asks.length) {
      rows.push(h("dt", {}, "Asks"), h("dd", {}, asks.map((r) => `${r} ${formatQuantity(why.request[r])}`).join(", ")));
    }
    if (why.flavors && why.flavors.length) {
      // Its quota's flavors in the order they are tried, each with the server's words for its refusal.
      rows.push(h("dt", {}, "Flavors tried"), h("dd", {}, h("ol", { id: "explain-flavors" }, why.flavors.map((t) =>
        h("li", { "data-flavor": t.flavor }, h("strong", {}, t.flavor), ` (${t.selects}): ${t.refused || "fits now"}`)))));
    }
    if (why.ahead.length) {
      rows.push(h("dt", {}, "Ahead of it"), h("dd", {}, h("ol", {}, why.ahead.map((item) =>
        h("li", {}, `${item.unit} (priority ${item.priority}): ${item.message}`)))));
    }
    // The advice is words from the server, the very lines `koord-queue explain` prints.
    rows.push(h("dt", {}, "What would let it in"));
    rows.push(h("dd", {}, h("ul", { id: "explain-advice" }, why.advice.map((line) => h("li", {}, line)))));
    return [title, h("dl", { class: "why" }, rows)];
  }

  async function showExplanation(unit) {
    const body = document.getElementById("explain-body");
    const [namespace, ...rest] = unit.split("/");
    const url = `api/explain/${encodeURIComponent(namespace)}/${encodeURIComponent(rest.join("/"))}`;
    let answer;
    try {
      const response = await fetch(url, { cache: "no-store" });
      answer = { ok: response.ok, body: await response.json() };
    } catch (error) {
      answer = { ok: false, body: { message: `The controller did not answer (${error.message}).` } };
    }
    if (explained !== unit) return; // another unit was chosen meanwhile
    body.replaceChildren(...(answer.ok ? explanation(answer.body) : [h("p", { class: "warning" }, answer.body.message)]));
    body.setAttribute("aria-busy", "false");
  }

  function openExplanation(button) {
    explained = button.dataset.unit;
    opener = button.dataset.key;
    document.getElementById("explain-title").textContent = `QueueUnit ${explained}`;
    const body = document.getElementById("explain-body");
    body.setAttribute("aria-busy", "true");
    body.replaceChildren(h("p", {}, "Asking the controller…"));
    if (!dialog.open) dialog.showModal();
    showExplanation(explained);
  }

  dialog.addEventListener("close", () => {
    explained = null;
    const back = opener && document.querySelector(`[data-key="${CSS.escape(opener)}"]`);
    (back || document.getElementById("queues-title")).focus();
  });
  document.getElementById("explain-close").addEventListener("click", () => dialog.close());
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button.unit");
    if (button) openExplanation(button);
  });

  // --- "Will it run?": a dry run of a pasted manifest -----------------------------------

  const dryForm = document.getElementById("dryrun-form");
  dryForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const result = document.getElementById("dryrun-result");
    const button = document.getElementById("dryrun-submit");
    result.setAttribute("aria-busy", "true");
    result.replaceChildren(h("p", {}, "Asking the controller…"));
    button.disabled = true;
    let answer;
    try {
      const response = await fetch("api/dry-run", {
        method: "POST", cache: "no-store", headers: { "Content-Type": "application/yaml" },
        body: document.getElementById("dryrun-manifest").value,
      });
      answer = { ok: response.ok, body: await response.json() };
    } catch (error) {
      answer = { ok: false, body: { message: `The controller did not answer (${error.message}).` } };
    }
    button.disabled = false;
    result.setAttribute("aria-busy", "false");
    if (!answer.ok) {
      result.replaceChildren(h("p", { class: "warning", id: "dryrun-error" }, answer.body.message));
      return;
    }
    const why = answer.body;
    const head = h("p", { id: "dryrun-head" }, `If submitted now (nothing was created), ${why.job} would get QueueUnit `,
      h("code", {}, why.unit), ". Could it ever fit: ",
      h("strong", { id: "dryrun-fits" }, why.couldEverFit ? "yes" : "no"), ".");
    const range = (why.expectedStartRange || []).map((t) => t || "?").join(" to ");
    const start = why.expectedStart ? `${why.expectedStart}${range ? ` (between ${range})` : ""}`
      : (why.couldEverFit ? "not within the forecast" : "never, as things are");
    const when = h("p", {}, "Expected start: ", h("strong", { id: "dryrun-start" }, start),
      why.basis ? `; runtimes from ${why.basis}` : "");
    // The rest is the explanation the queue table's dialog shows, ids made unique.
    const details = explanation(why).map((node) => {
      node.querySelectorAll?.("[id]").forEach((e) => { e.id = `dryrun-${e.id.replace(/^explain-/, "")}`; });
      return node;
    });
    result.replaceChildren(head, when, ...details);
  });

  // --- live data ---------------------------------------------------------------------

  let lastSummary = "";

  function setConnection(text) {
    const status = document.getElementById("connection");
    if (status.textContent !== text) status.textContent = text; // a live region: speak only changes
  }

  function render(view) {
    const focused = document.activeElement?.dataset?.key; // re-drawing must not lose the keyboard's place
    renderQuotas(view);
    renderQueues(view);
    renderRecent(view);
    if (focused && !dialog.open) document.querySelector(`[data-key="${CSS.escape(focused)}"]`)?.focus();
    const pending = pendingCount(view);
    const summary = `Live: ${view.quotas.length} quota${view.quotas.length === 1 ? "" : "s"}, ` +
      `${pending} pending unit${pending === 1 ? "" : "s"}.`;
    if (summary !== lastSummary) setConnection(summary);
    lastSummary = summary;
    document.body.dataset.updated = String(view.time);
    if (explained) showExplanation(explained);
  }

  function setAvailable(available, message) {
    document.getElementById("content").hidden = !available;
    const notice = document.getElementById("unavailable");
    notice.hidden = available;
    notice.textContent = available ? "" : message;
  }

  function connect() {
    const source = new EventSource("api/stream");
    source.addEventListener("overview", (event) => {
      setAvailable(true, "");
      render(JSON.parse(event.data));
    });
    source.addEventListener("unavailable", (event) => {
      lastSummary = "";
      setConnection("Not available: see the notice below.");
      setAvailable(false, JSON.parse(event.data).message);
      if (dialog.open) dialog.close();
    });
    source.addEventListener("error", () => {
      lastSummary = "";
      setConnection("Connection to the controller lost; retrying…");
      // An answer other than a stream (429: too many open) closes it for good: open another later.
      if (source.readyState === EventSource.CLOSED) setTimeout(connect, 5000);
    });
  }

  connect();
})();
