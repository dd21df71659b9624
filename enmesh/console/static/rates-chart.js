// Messages per second over the last hour, drawn by Chart.js (static/vendor, installed by
// `make setup`) for every <canvas class="rates-chart">: the data from the console's own
// JSON endpoint named by its data-url (same origin: the page's CSP allows nothing else),
// what happened in the element its data-status names. The space's page and each
// address's page use it, with their own URL.
(function () {
  "use strict";
  if (typeof Chart === "undefined") {  // static/vendor is filled by `make setup`
    document.querySelectorAll("canvas.rates-chart").forEach((canvas) => {
      const status = document.getElementById(canvas.dataset.status);
      if (status) { status.textContent = "Chart.js is not installed (make setup)."; }
    });
    return;
  }
  function draw(canvas) {
    const status = document.getElementById(canvas.dataset.status);
    const say = (text) => { if (status) { status.textContent = text; } };
    fetch(canvas.dataset.url, { credentials: "same-origin" })
      .then((reply) => reply.json().then((body) => ({ ok: reply.ok, body: body })))
      .then(({ ok, body }) => {
        if (!ok) { say(body.error || "no data"); return; }
        if (body.empty) {
          say("Prometheus has no data for the last hour.");
          canvas.parentElement.hidden = true;
          return;
        }
        new Chart(canvas, {
          type: "line",
          data: { labels: body.labels, datasets: body.datasets },
          options: {
            animation: false,
            responsive: true,
            maintainAspectRatio: false,
            spanGaps: true,
            scales: {
              x: { title: { display: true, text: body.time } },
              y: { beginAtZero: true, title: { display: true, text: body.unit } },
            },
          },
        });
        say("");
      })
      .catch((error) => { say("cannot load the chart: " + error); });
  }
  document.querySelectorAll("canvas.rates-chart").forEach(draw);
})();
