// Keeps the status page live while it is open: every data-refresh-ms it
// fetches the server-rendered live part of the page (ui/live) and swaps it
// in, so the browser shows exactly what the server rendered and nothing is
// computed here. Without JavaScript, a meta refresh reloads the page.
(function () {
  "use strict";
  var body = document.body;
  var live = document.getElementById("live");
  var conn = document.getElementById("conn");
  var every = parseInt(body.getAttribute("data-refresh-ms"), 10) || 2000;
  var polls = 0;
  var timer = null;

  function setConn(ok, text) {
    conn.textContent = text;
    conn.className = "conn " + (ok ? "ok" : "bad");
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(poll, every);
  }

  function poll() {
    clearTimeout(timer);
    if (document.hidden) {
      schedule();
      return;
    }
    fetch("ui/live", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        return r.text().then(function (text) {
          // A 503 carries a rendered error banner: show it as well.
          live.innerHTML = text;
          polls++;
          body.setAttribute("data-polls", String(polls));
          setConn(r.ok, r.ok ? "live" : "agent error " + r.status);
        });
      })
      .catch(function () {
        setConn(false, "agent unreachable, retrying");
      })
      .then(schedule);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      poll();
    }
  });
  setConn(true, "live");
  schedule();
})();
