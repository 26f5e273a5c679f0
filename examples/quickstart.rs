use arbor_client::{Client, ClientOptions, CreateMode, Error};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let server = std::env::var("ARBOR_SERVER").unwrap_or_else(|_| "127.0.0.1:7181".into());
    let client = Client::connect(&server, ClientOptions::default()).await?;

    // A persistent node, read back with its stat.
    match client
        .create("/app", b"v1".to_vec(), CreateMode::Persistent)
        .await
    {
        Ok(_) | Err(Error::NodeExists { .. }) => {}
        Err(err) => return Err(err),
    }
    let (data, stat) = client.get_data("/app").await?;
    let data = String::from_utf8_lossy(&data);
    println!(
        "/app = {data:?} (version {}, czxid {:#x})",
        stat.version, stat.czxid
    );

    // An ephemeral sequential node lives exactly as long as this session.
    let me = client
        .create("/app/worker-", Vec::new(), CreateMode::EphemeralSequential)
        .await?;
    println!("registered as {me}");

    // A one-shot watch fires once: here, when the node goes.
    let (_, gone) = client.exists_watch(&me).await?;
    client.delete(&me, None).await?;
    let event = gone.await?;
    println!("watch fired: {:?} {}", event.event_type, event.path);

    client.close().await
}
