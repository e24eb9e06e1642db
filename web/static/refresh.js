// Reloads the page every 10 seconds while the box is ticked; the choice is
// remembered per browser. The page works the same without JavaScript.
(function () {
  var box = document.getElementById("autorefresh");
  if (!box) return;
  var key = "shoal.autorefresh";
  box.checked = localStorage.getItem(key) !== "off";
  var timer = null;
  function arm() {
    if (timer) clearTimeout(timer);
    timer = box.checked ? setTimeout(function () { location.reload(); }, 10000) : null;
  }
  box.addEventListener("change", function () {
    localStorage.setItem(key, box.checked ? "on" : "off");
    arm();
  });
  arm();
})();
