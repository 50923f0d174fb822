// The console's actions (docs/operations.md, "Console"): each button
// asks for a confirmation, then POSTs its body to the API with the CSRF
// token of the page, and shows what was done.
"use strict";
(function () {
  const token = document.querySelector('meta[name="csrf-token"]');
  const confirmBox = document.getElementById("confirm");
  const confirmText = document.getElementById("confirm-text");
  const result = document.getElementById("result");
  let pending = null;

  document.addEventListener("click", function (ev) {
    const b = ev.target.closest("button.act");
    if (!b || !token) return;
    pending = b;
    confirmText.textContent = b.dataset.confirm;
    confirmBox.hidden = false;
    document.getElementById("confirm-yes").focus();
  });
  document.getElementById("confirm-no").addEventListener("click", function () {
    pending = null;
    confirmBox.hidden = true;
  });
  document.getElementById("confirm-yes").addEventListener("click", async function () {
    const b = pending;
    pending = null;
    confirmBox.hidden = true;
    if (!b) return;
    show("working", b.dataset.action + "…", []);
    let res;
    try {
      const r = await fetch("/api/v1/sources/" + encodeURIComponent(b.dataset.source) + "/" + b.dataset.action, {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": token.content },
        body: b.dataset.body,
      });
      res = await r.json();
    } catch (e) {
      show("failed", "the request failed: " + e, []);
      return;
    }
    if (res.error) {
      show("failed", res.error, []);
      return;
    }
    const lines = res.outcomes.map(function (o) {
      return o.result + " " + (o.id || o.at) + (o.sinks && o.sinks.length ? " to " + o.sinks.join(", ") : "") + (o.error ? ": " + o.error : "");
    });
    res.released.forEach(function (k) { lines.push("key " + k.split("|").slice(1).join("|") + " released"); });
    show(res.failed > 0 ? "failed" : "done", res.action + ": " + (res.failed > 0 ? res.failed + " failed" : "done"), lines);
  });

  function show(state, title, lines) {
    result.replaceChildren();
    result.className = "result " + state;
    result.dataset.state = state;
    const h = document.createElement("strong");
    h.textContent = title;
    result.append(h);
    const ul = document.createElement("ul");
    lines.forEach(function (l) {
      const li = document.createElement("li");
      li.textContent = l;
      ul.append(li);
    });
    result.append(ul);
    if (state !== "working") {
      const a = document.createElement("a");
      a.href = "/console/";
      a.id = "reload";
      a.textContent = "Reload to see the new state";
      result.append(a);
    }
    result.hidden = false;
  }
})();
