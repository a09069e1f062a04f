// A community-style extension for SillyTavern 1.12, before ToolManager: it announces its
// function tools on LLM_FUNCTION_TOOL_REGISTER and acts on LLM_FUNCTION_TOOL_CALL.
const {eventSource, eventTypes} = SillyTavern.getContext();
const log = document.createElement("div");
log.id = "dice_test_log";
document.body.appendChild(log);
globalThis.diceTest = {rolls: []};

eventSource.on(eventTypes.LLM_FUNCTION_TOOL_REGISTER, ({registerFunctionTool}) => {
  registerFunctionTool("roll_dice", "Roll one die with the given number of sides.", {
    type: "object",
    properties: {sides: {type: "integer", description: "Sides of the die, e.g. 20."}},
    required: ["sides"],
  });
  registerFunctionTool("boom", "Knock over the dice tower.", {type: "object", properties: {}});
});

eventSource.on(eventTypes.LLM_FUNCTION_TOOL_CALL, (call) => {
  if (call.name === "roll_dice") {
    const {sides} = JSON.parse(call.arguments);
    globalThis.diceTest.rolls.push({sides});
    const line = document.createElement("p");
    line.textContent = `rolled d${sides}`;
    log.appendChild(line);
  } else if (call.name === "boom") {
    throw new Error("the dice tower fell over");
  }
});
