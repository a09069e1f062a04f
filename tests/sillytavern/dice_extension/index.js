// A community-style SillyTavern extension: it registers function tools the way third-party
// extensions do, through SillyTavern.getContext().registerFunctionTool.
const context = SillyTavern.getContext();
const log = document.createElement("div");
log.id = "dice_test_log";
document.body.appendChild(log);

// What ran, for the test to read; `hold` lets a test keep a roll waiting.
globalThis.diceTest = {rolls: [], fadingRan: false, held: null};

context.registerFunctionTool({
  name: "roll_dice",
  displayName: "Roll dice",
  description: "Roll one die with the given number of sides; returns the roll.",
  parameters: {
    $schema: "http://json-schema.org/draft-04/schema#",
    type: "object",
    properties: {sides: {type: "integer", description: "Sides of the die, e.g. 20."}},
    required: ["sides"],
  },
  action: async ({sides}) => {
    const roll = {sides, value: Math.min(4, sides)};
    globalThis.diceTest.rolls.push(roll);
    const line = document.createElement("p");
    line.textContent = `rolled d${sides}: ${roll.value}`;
    log.appendChild(line);
    if (globalThis.diceTest.held) await globalThis.diceTest.held;
    return roll;
  },
  formatMessage: ({sides}) => `Rolling a d${sides}…`,
});

context.registerFunctionTool({
  name: "boom",
  description: "Knock over the dice tower.",
  parameters: {type: "object", properties: {}},
  action: () => {
    throw new Error("the dice tower fell over");
  },
});

context.registerFunctionTool({
  name: "fading",
  description: "A tool this extension withdraws again.",
  parameters: {type: "object", properties: {}},
  action: () => {
    globalThis.diceTest.fadingRan = true;
    return "ran";
  },
});

context.registerFunctionTool({
  name: "secret_roll",
  description: "A stealth tool: its result is never shown.",
  parameters: {type: "object", properties: {}},
  action: () => "hidden",
  stealth: true,
});

context.registerFunctionTool({
  name: "offline_oracle",
  description: "A tool that asks not to be offered now.",
  parameters: {type: "object", properties: {}},
  action: () => "nothing",
  shouldRegister: () => false,
});
