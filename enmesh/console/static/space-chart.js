// The space's traffic over the last hour, drawn by Chart.js (static/vendor, installed by
// `make setup`) from the console's own JSON endpoint (same origin: the page's CSP allows
// nothing else).
(function () {
  "use strict";
  const canvas = document.getElementById("rates-chart");
  if (!canvas || typeof Chart === "undefined") { return; }
  const status = document.getElementById("rates-status");
  fetch(canvas.dataset.url, { credentials: "same-origin" })
    .then((reply) => reply.json().then((body) => ({ ok: reply.ok, body: body })))
    .then(({ ok, body }) => {
      if (!ok) { status.textContent = body.error || "no data"; return; }
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
      status.textContent = "";
    })
    .catch((error) => { status.textContent = "cannot load the chart: " + error; });
})();
