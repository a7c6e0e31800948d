// The live page: each click opens one more WebSocket and lists it with what the server said.
(function () {
  "use strict";
  var list = document.getElementById("sockets");
  var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  var url = scheme + window.location.host + list.dataset.url;
  var opened = 0;

  function open() {
    opened += 1;
    var item = document.createElement("li");
    var state = document.createElement("span");
    var close = document.createElement("button");
    item.className = "socket";
    item.id = "socket-" + opened;
    state.className = "state";
    state.textContent = "connecting";
    close.type = "button";
    close.textContent = "Close";
    item.append("Socket " + opened + ": ", state, " ", close);
    list.append(item);
    var socket = new WebSocket(url);
    socket.onmessage = function (event) {
      state.textContent = event.data;
      item.dataset.state = "open";
    };
    socket.onclose = function (event) {
      var reason = event.reason ? " (" + event.reason + ")" : "";
      state.textContent = "closed with " + event.code + reason;
      item.dataset.state = "closed";
      item.dataset.code = String(event.code);
      close.remove();
    };
    close.onclick = function () {
      socket.close(1000);
    };
  }

  document.getElementById("open-socket").addEventListener("click", open);
})();
