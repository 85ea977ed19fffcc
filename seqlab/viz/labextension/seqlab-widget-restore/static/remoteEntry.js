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
 * The loader contract is webpack's module federation: a global _JUPYTERLAB[name] with init(scope) and
 * get("./extension").
 */
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "seqlab-widget-restore";
  var MANAGER = "@jupyter-widgets/jupyterlab-manager";
  var shared = null;

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
    proto.restoreWidgets = function () {
      var self = this;
      var args = arguments;
      var run = function () { return restore.apply(self, args); };
      var before = self.__seqlabRestoring || Promise.resolve();
      self.__seqlabRestoring = before.then(run, run);
      return self.__seqlabRestoring;
    };
    proto.__seqlabOneRestoreAtATime = true;
  }

  var plugin = {
    id: NAME + ":plugin",
    description: "A notebook's saved widgets never show 'model not found' on a fresh open (two races fixed).",
    autoStart: true,
    activate: function () {
      var versions = shared && shared[MANAGER];
      var found = versions ? Object.keys(versions) : [];
      if (!found.length) {
        console.warn(NAME + ": " + MANAGER + " is not in the shared scope; its widget manager is left as it is");
        return;
      }
      found.sort(function (a, b) { return a.localeCompare(b, undefined, { numeric: true }); });
      return Promise.resolve(versions[found[found.length - 1]].get()).then(function (factory) {
        patch(factory().WidgetManager);
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
