// The console's one script: the jobs page follows the queue (GET /console/api/jobs every second)
// and the runs page its runs (GET /console/api/runs every two seconds), each updating its rows'
// status and progress bars in place. Everything else is plain HTML forms.
"use strict";

function setProgress(cell, job) {
  const p = job.progress;
  let bar = cell.querySelector("progress");
  if (!bar) { bar = document.createElement("progress"); cell.prepend(bar); }
  bar.setAttribute("aria-label", "job " + job.id + " progress");
  let figure = cell.querySelector(".figure");
  if (!figure) { figure = document.createElement("span"); figure.className = "figure"; bar.after(figure); }
  if (p && p.total) {
    bar.max = p.total; bar.value = p.done || 0;
    figure.textContent = (p.done || 0) + " / " + p.total;
  } else if (job.status === "done") {
    bar.max = 1; bar.value = 1; figure.textContent = "done";
  } else {
    bar.removeAttribute("value"); figure.textContent = "";
  }
  // the time left at the pace so far: seconds running x what is left / what is done
  let eta = cell.querySelector(".eta");
  if (job.status === "running" && p && p.total && p.done && job.running_s && p.done < p.total) {
    if (!eta) { eta = document.createElement("span"); eta.className = "eta"; figure.after(eta); }
    eta.textContent = " about " + Math.round(job.running_s * (p.total - p.done) / p.done) + " s left";
  } else if (eta) { eta.remove(); }
  let note = cell.querySelector(".note");
  if (p && p.note) {
    if (!note) { note = document.createElement("span"); note.className = "note"; cell.append(note); }
    note.textContent = " " + p.note;
  } else if (note) { note.remove(); }
}

function row(job) {
  const tr = document.createElement("tr");
  tr.dataset.job = String(job.id);
  const th = document.createElement("th"); th.scope = "row"; th.textContent = String(job.id);
  const kind = document.createElement("td"); kind.textContent = job.kind;
  const status = document.createElement("td");
  const progress = document.createElement("td"); progress.className = "progress";
  const error = document.createElement("td"); error.className = "error";
  tr.append(th, kind, status, progress, error);
  return tr;
}

async function follow() {
  const body = document.querySelector("#jobs tbody");
  const live = document.getElementById("live");
  try {
    const reply = await fetch("/console/api/jobs", { credentials: "same-origin", cache: "no-store" });
    if (!reply.ok) { live.textContent = "Could not read the queue (" + reply.status + ")."; return; }
    const data = await reply.json();
    const seen = new Map([...body.querySelectorAll("tr[data-job]")].map((tr) => [tr.dataset.job, tr]));
    const jobs = data.recent.slice().reverse();
    for (const job of jobs) {
      let tr = seen.get(String(job.id));
      if (!tr) { tr = row(job); body.prepend(tr); }
      const status = tr.children[2];
      status.textContent = job.status; status.className = "status status-" + job.status;
      setProgress(tr.children[3], job);
      tr.children[4].textContent = job.error || "";
    }
    live.textContent = "Followed at " + new Date().toLocaleTimeString() + "; " + data.running.length + " running.";
  } catch (err) {
    live.textContent = "Could not read the queue.";
  }
}

if (document.body.dataset.page === "jobs") {
  follow();
  setInterval(follow, 1000);
}

const RUN_WORDS = { active: ["ok", "active"], running: ["warn", "building"], failed: ["bad", "failed"] };

async function followRuns() {
  const live = document.getElementById("live");
  try {
    const reply = await fetch("/console/api/runs", { credentials: "same-origin", cache: "no-store" });
    if (!reply.ok) { live.textContent = "Could not read the runs (" + reply.status + ")."; return; }
    const data = await reply.json();
    for (const run of data.runs) {
      const tr = document.querySelector('tr[data-run="' + run.run_id + '"]');
      if (!tr) { continue; }
      const [cls, word] = RUN_WORDS[run.status] || ["muted", run.status];
      const status = tr.querySelector("td.status > span");
      status.className = cls; status.textContent = word;
      const bar = tr.querySelector("progress");
      bar.max = Math.max(run.expected, 1); bar.value = run.staged;
      bar.setAttribute("aria-label", "Run " + run.run_id + ": " + run.staged + " of " + run.expected + " files staged");
      tr.querySelector(".figure").textContent = run.staged + " / " + run.expected;
      const parts = [];
      if (run.staging) { parts.push(run.staging + " staging"); }
      if (run.pending) { parts.push(run.pending + " waiting"); }
      tr.querySelector(".detail").textContent = parts.join(", ");
      tr.querySelector(".eta").textContent = run.eta_s === null ? "" : "about " + run.eta_s + " s left";
      tr.querySelector(".chunks").textContent = String(run.chunks);
    }
    live.textContent = "Followed at " + new Date().toLocaleTimeString() + "; " +
      data.runs.filter((r) => r.status === "running").length + " building.";
  } catch (err) {
    live.textContent = "Could not read the runs.";
  }
}

if (document.body.dataset.page === "runs") {
  followRuns();
  setInterval(followRuns, 2000);
}
