// The console works without this file; it only adds the copy button for a newly issued key.
document.querySelectorAll("button[data-copy]").forEach(function (b) {
  b.hidden = false;
  b.addEventListener("click", function () {
    var text = document.getElementById(b.dataset.copy).textContent;
    navigator.clipboard.writeText(text).then(function () { b.textContent = "Copied"; });
  });
});
