// Loads a GGUF file in llama.cpp (node-llama-cpp's prebuilt CPU build, no compiler needed) and
// writes the prompt's token ids and its greedy completion to OUT_PREFIX.ids / OUT_PREFIX.txt:
//   node llama_cpp_load.mjs FILE.gguf PROMPT MAX_TOKENS OUT_PREFIX
// Used by llama_cpp_check.sh; knows nothing of trillion.
import {writeFileSync} from "node:fs";
import {getLlama, LlamaCompletion} from "node-llama-cpp";

const [path, prompt, maxTokens, out] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never"});
const model = await llama.loadModel({modelPath: path});
writeFileSync(out + ".ids", Array.from(model.tokenize(prompt)).join(" "));
const context = await model.createContext({contextSize: model.trainContextSize});
const completion = new LlamaCompletion({contextSequence: context.getSequence()});
const text = await completion.generateCompletion(prompt, {maxTokens: Number(maxTokens), temperature: 0});
writeFileSync(out + ".txt", prompt + text);
