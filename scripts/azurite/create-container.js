// Creates the tests' container in Azurite (scripts/azurite.sh start): with the emulator's
// well-known account and key, which are public and fixed by Azurite.
const { BlobServiceClient, StorageSharedKeyCredential } = require("@azure/storage-blob");
const [port, container] = process.argv.slice(2);
const account = "devstoreaccount1";
const key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const service = new BlobServiceClient(`http://127.0.0.1:${port}/${account}`, new StorageSharedKeyCredential(account, key));
service
  .getContainerClient(container)
  .createIfNotExists()
  .then(() => process.exit(0))
  .catch((e) => {
    console.error(`azurite: cannot create container '${container}': ${e.message}`);
    process.exit(1);
  });
