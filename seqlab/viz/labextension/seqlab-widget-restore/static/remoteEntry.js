/* seqlab-widget-restore: a JupyterLab plugin (a prebuilt "federated" extension, written by hand: no build step)
 * that keeps a notebook's saved widgets from showing "Error displaying widget: model not found" on a fresh open.
 *
 * Why. @jupyter-widgets/jupyterlab-manager 5.0 (the Python package jupyterlab-widgets 3.0) draws a widget output
 * by asking its manager for the model (get_model polls for 2 s); if the model is not there and the manager is not
 * yet "restored", the output waits for the "restored" signal and asks again. Two races break this:
 *  - the manager restores from its constructor (the kernel's models, then the models saved in the notebook) and
 *    again when the kernel connects (the kernel alone); the second can end first, mark the manager "restored"
 *    while the saved models are still being registered, and every waiting output asks again too early;
 *  - an output whose 2 s poll ends just after the restore has finished reads "restored", and gives up, although
 *    its model was registered a moment before and the "restored" signal it would wait for has already passed.
 * Either way the output shows "model not found" for good; which outputs lose changes from one open to the next,
 * more often on a busy machine (a slow kernel start).
 *
 * What. On the manager class the widget manager itself uses (taken from the shared module scope JupyterLab gives
 * every extension): restoreWidgets runs one restore at a time on a manager, and get_model, when the model is not
 * found, asks again if it has been registered meanwhile, or waits for the restore under way and asks again.
 *
 * Opening leaves the notebook unmodified. With "save widget state" on, the manager marks the notebook modified
 * (setDirty) for every model it registers, the models it restores from the notebook itself included: every lesson
 * showed the unsaved dot and asked to be saved on close although nothing had changed. A restore now registers its
 * models without marking the notebook modified; a model the kernel makes afterwards still marks it, as before.
 *
 * Saved widgets before the kernel has made them. A control restored from the notebook has no kernel behind it
 * (its model's comm is not live): the manager marks it with a red broken-chain icon, which reads as an error,
 * and dragging it moves its readout while its figure stays. Such a control is made inert (not clickable, not
 * focusable) and dimmed, the icon is hidden, and its output shows one line: run the cell to make it live. A
 * control the kernel made is left as it is.
 *
 * The loader contract is webpack's module federation: a global _JUPYTERLAB[name] with init(scope) and
 * get("./extension").
 */
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "seqlab-widget-restore";
  var MANAGER = "@jupyter-widgets/jupyterlab-manager";
  var BASE = "@jupyter-widgets/base";
  // what a student can change, by model name: sliders (integer, float, log, selection), menus, buttons, boxes to tick
  // or type in (their views get their CSS classes only when drawn, after the first comm-live update)
  var CONTROLS = /^(?:\w*Slider|Dropdown|Select\w*|\w*Buttons?|Checkbox|\w*Text|Textarea|Play|Combobox|\w*Picker|TagsInput|FileUpload)Model$/;
  var HINT = "Saved controls: run this cell to make them live.";
  var STYLE = [
    ".jupyter-widgets-disconnected::before { content: none !important; display: none !important; }",
    ".seqlab-saved-control { opacity: 0.55; }",
    ".jp-OutputArea-output:has(.seqlab-saved-control)::before { content: \"" + HINT + "\"; display: block;" +
    " flex-basis: 100%; font-style: italic; color: var(--jp-ui-font-color2); margin: 0 0 4px 0; }"
  ].join("\n");
  var shared = null;

  function latest(name) {
    var versions = shared && shared[name];
    var found = versions ? Object.keys(versions) : [];
    if (!found.length) {
      return null;
    }
    found.sort(function (a, b) { return a.localeCompare(b, undefined, { numeric: true }); });
    return Promise.resolve(versions[found[found.length - 1]].get()).then(function (factory) { return factory(); });
  }

  function nextRestored(manager) {
    return new Promise(function (resolve) {
      var once = function () { manager.restored.disconnect(once); resolve(); };
      manager.restored.connect(once);
    });
  }

  function patch(WidgetManager) {
    var proto = WidgetManager && WidgetManager.prototype;
    if (!proto || typeof proto.restoreWidgets !== "function" || typeof proto.get_model !== "function") {
      throw new Error(NAME + ": " + MANAGER + "'s WidgetManager has no restoreWidgets or get_model to wrap");
    }
    if (proto.__seqlabOneRestoreAtATime) {
      return;
    }
    var restore = proto.restoreWidgets;
    var getModel = proto.get_model;
    var setDirty = proto.setDirty;
    proto.get_model = function (modelId) {
      var self = this;
      return getModel.apply(self, arguments).catch(function (error) {
        if (self.has_model(modelId)) {          // registered just as the poll ended
          return getModel.call(self, modelId);
        }
        if (self.restoredStatus) {              // restored, and not there: truly missing
          throw error;
        }
        return nextRestored(self).then(function () { return getModel.call(self, modelId); });
      });
    };
    if (typeof setDirty === "function") {
      proto.setDirty = function () {
        if (this.__seqlabRestores) {          // a model restored from the notebook changes nothing in it
          return;
        }
        return setDirty.apply(this, arguments);
      };
    }
    proto.restoreWidgets = function () {
      var self = this;
      var args = arguments;
      var run = function () {
        self.__seqlabRestores = (self.__seqlabRestores || 0) + 1;
        var done = function () { self.__seqlabRestores -= 1; };
        var running = Promise.resolve(restore.apply(self, args));
        running.then(done, done);
        return running;
      };
      var before = self.__seqlabRestoring || Promise.resolve();
      self.__seqlabRestoring = before.then(run, run);
      return self.__seqlabRestoring;
    };
    proto.__seqlabOneRestoreAtATime = true;
  }

  function markSavedControls(DOMWidgetView) {
    var proto = DOMWidgetView && DOMWidgetView.prototype;
    if (!proto || typeof proto._comm_live_update !== "function") {
      throw new Error(NAME + ": " + BASE + "'s DOMWidgetView has no _comm_live_update to wrap");
    }
    if (proto.__seqlabSavedControls) {
      return;
    }
    var update = proto._comm_live_update;
    proto._comm_live_update = function () {
      var result = update.apply(this, arguments);
      var el = this.el;
      if (el && CONTROLS.test(this.model.get("_model_name") || "")) {
        var saved = !this.model.comm_live;
        el.inert = saved;
        el.classList.toggle("seqlab-saved-control", saved);
      }
      return result;
    };
    proto.__seqlabSavedControls = true;
  }

  function addStyle() {
    if (document.getElementById(NAME + "-style")) {
      return;
    }
    var style = document.createElement("style");
    style.id = NAME + "-style";
    style.textContent = STYLE;
    document.head.appendChild(style);
  }

  var plugin = {
    id: NAME + ":plugin",
    description: "A notebook opens unmodified, its saved widgets drawn (never 'model not found') and marked as not yet live.",
    autoStart: true,
    activate: function () {
      var manager = latest(MANAGER);
      var base = latest(BASE);
      if (!manager || !base) {
        console.warn(NAME + ": " + MANAGER + " or " + BASE + " is not in the shared scope; widgets are left as they are");
        return;
      }
      addStyle();
      return Promise.all([manager, base]).then(function (modules) {
        patch(modules[0].WidgetManager);
        markSavedControls(modules[1].DOMWidgetView);
      });
    }
  };

  (_JUPYTERLAB = typeof _JUPYTERLAB === "undefined" ? {} : _JUPYTERLAB)[NAME] = {
    init: function (scope) { shared = scope; },
    get: function (module) {
      if (module !== "./extension") {
        return Promise.reject(new Error(NAME + " exposes ./extension only, not " + module));
      }
      return Promise.resolve(function () { return { __esModule: true, default: plugin }; });
    }
  };
})();
