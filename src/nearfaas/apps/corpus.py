"""English text written for the applications, kept in code so that nothing is downloaded.

Three parts, all plain English written for this project:

* ``FAQ``: questions and answers about running functions on nearfaas. The chatbot answers
  questions against these passages (f1 picks the passage that best matches the question), and
  its sample inputs are questions a user would ask.
* ``SITE``: website copy of the kind a company localises (a shop, a help centre, a travel
  page, a newsletter). The translation app's sample inputs come from here.
* ``PROSE``: short passages of general prose, so that the tokenizers also learn ordinary words.

The tokenizers in ``data/`` are trained on ``training_lines()`` by ``build_tokenizers.py``.
"""

from __future__ import annotations

FAQ: list[tuple[str, str]] = [
    ("What is nearfaas?",
     "nearfaas is a serverless platform that runs each function on the storage node that holds its input object, "
     "so the data does not have to cross the network before the function can read it."),
    ("How do I start a local cluster?",
     "Run nearfaas up. It starts a gateway, two storage nodes and a compute node on this machine and prints the "
     "gateway URL. Run nearfaas down to stop every process it started."),
    ("How do I deploy a function?",
     "Describe the function in a stack file and run nearfaas deploy with the file. The stack file uses the same "
     "format as OpenFaaS, with an extra x-nearfaas block for placement hints."),
    ("What does a handler look like?",
     "A handler is a folder with a file named handler.py that defines handle(event, context). The function returns "
     "a dictionary with a status code and a body, or any value that can be written as JSON."),
    ("Where does my function run?",
     "If the function is marked as acceleratable and its input object lives on a storage node with an accelerator, "
     "the near-data policy runs it on that node. Otherwise it runs on a compute node."),
    ("What happens when the accelerator is busy?",
     "The scheduler does not wait for it. The call is sent to a compute node instead, and the function reads its "
     "input over the network, exactly as it would on a traditional platform."),
    ("How do I upload an object?",
     "Use any S3 client pointed at the gateway URL, such as boto3 or the AWS command line, or run nearfaas put with "
     "a local file and an s3 address."),
    ("Which S3 operations are supported?",
     "Buckets can be created, listed and deleted. Objects can be written, read with ranges, listed by prefix, copied "
     "in multipart uploads and deleted. Other operations answer with a clear not implemented error."),
    ("How does a function read its input?",
     "The function calls context.objects.get with context.input. When the object is stored on the same node, the "
     "call returns a memory map of the file, so no bytes are copied through a socket."),
    ("What is a chain?",
     "A chain is an application made of several functions. Each stage writes its result to context.output, and the "
     "next stage receives that object as its input. Calling the first function runs the whole chain."),
    ("Where are intermediate results kept?",
     "Intermediates are written to the bucket named nearfaas-intermediates on the node that produced them, and they "
     "are deleted when the chain has answered unless the first function asks to keep them."),
    ("Why is the notification stage not accelerated?",
     "The notification only reads a small result and calls a webhook. It gains nothing from the accelerator, so it "
     "runs on an ordinary compute node and leaves the drive free for the next request."),
    ("What is a cold start?",
     "A cold start happens when no worker is ready for the function. The node prepares a new worker, imports the "
     "handler and runs its init function, which is where a model should be loaded."),
    ("How can I reduce cold starts?",
     "Keep at least one instance warm with the scale minimum label, and load large files once in init instead of "
     "on every call. Nodes also keep generic workers ready so that a cold start only has to specialise one."),
    ("How long may a function run?",
     "Each function has an execution timeout taken from its environment. When a call runs longer, the worker is "
     "stopped and replaced, and the caller receives a gateway timeout that names the layer."),
    ("How many calls can run at the same time?",
     "The max_inflight setting limits concurrent calls per instance. Beyond that limit calls wait in a queue, and "
     "when the queue is full the gateway answers too many requests with a retry hint."),
    ("How do I see the logs of a function?",
     "Run nearfaas logs with the function name, or ask the gateway for system logs. Every line printed by the "
     "handler is recorded with its time, its worker and its stream."),
    ("How do I pass a secret to a function?",
     "Create the secret with nearfaas secret create, list its name under secrets in the stack file, and read it in "
     "the handler from context.secrets."),
    ("Can a new object start a function automatically?",
     "Yes. List a bucket and prefix under triggers in the x-nearfaas block. Every object created under that prefix "
     "queues an asynchronous call with the object as its input."),
    ("What does the placement hint data mean?",
     "Placement data asks the scheduler to run the function next to its input. Placement compute keeps it on "
     "compute nodes, and auto lets the policy decide."),
    ("What is the emulated link?",
     "Traffic between compute and storage nodes passes through an emulated link with a configurable latency and "
     "bandwidth. A read of an object on the same node never crosses the link."),
    ("Which link profiles exist?",
     "The local profile adds nothing. The data centre profile adds a fraction of a millisecond and limits bandwidth "
     "to a fast network. The s3-like profile adds tens of milliseconds, like a remote object store."),
    ("How do I measure where time goes?",
     "Invoke the function with the verbose flag. The answer lists each stage with its node, its placement, and the "
     "time spent in the stack, in moving data and in computing."),
    ("Are the accelerator timings real?",
     "No. This machine has no computational storage drive, so accelerator timings come from a model. Every number "
     "says whether it was measured here or computed by a model, and which device model produced it."),
    ("What models do the applications use?",
     "The applications use logistic regression, ResNet-50, YOLOv3, a fully convolutional network, EfficientNet, "
     "BERT, GPT-2 and a vision transformer, built in code as ONNX graphs and run with ONNX Runtime."),
    ("Why are the models built in code?",
     "Nothing is downloaded from a model hub. The graphs have the published architectures and input shapes, with "
     "seeded random weights, so their cost is realistic even though their answers are not trained."),
    ("What does the credit risk application do?",
     "It reads loan applications as JSON lines or CSV, turns each one into two hundred numeric features and scores "
     "it with logistic regression. The notification reports which applications should be referred to a person."),
    ("What does the asset damage application do?",
     "It classifies photographs taken by security cameras so that damaged equipment can be repaired before it "
     "fails. The notification is raised when the classifier is confident."),
    ("What does the PPE detection application do?",
     "It looks for people and their safety gear in images from a factory floor. The detector finds objects in the "
     "picture and the notification reports how many were found."),
    ("What does the clinical analysis application do?",
     "It segments a medical scan into regions, one label for every pixel, and reports how much of the image each "
     "region covers."),
    ("What does the content moderation application do?",
     "It classifies uploaded pictures so that inappropriate or offensive content can be held back for review."),
    ("What does the chatbot application do?",
     "It answers a question by finding the most likely span of text in a passage of this help page. The answer is "
     "returned with the position of its first and last token."),
    ("What does the translation application do?",
     "It localises short pieces of website text. The model predicts the next token at every position of the input, "
     "and the answer previews the predicted tokens."),
    ("What does the remote sensing application do?",
     "It classifies aerial images taken by drones, for example to watch roads, fields and buildings for changes."),
    ("How large may a request body be?",
     "A request body may hold up to eight mebibytes. Larger inputs should be uploaded as objects and passed to the "
     "function by reference."),
    ("What happens if a storage node fails?",
     "Objects are replicated, so another node still holds a copy. A call that was running on the lost node may be "
     "retried elsewhere when the function is marked as idempotent."),
    ("Does nearfaas need containers?",
     "No. There is no container engine. A function is a folder with a Python handler, and each warm instance is a "
     "separate Python process."),
    ("Can I use my existing stack file?",
     "Usually yes. Fields that only matter for building images are accepted and ignored, so the same file still "
     "works with faas-cli."),
    ("How are metrics exported?",
     "The gateway serves Prometheus metrics, including calls, latency, cold starts and bytes that crossed the link, "
     "so existing dashboards keep working."),
    ("What happens when a stage of a chain fails?",
     "The chain stops at that stage. Its status and body are returned to the caller, and a header names the stage "
     "that failed."),
    ("Why did my call return a bad request?",
     "The body explains what was wrong and how to fix it. A stage of an application names itself, so you can tell "
     "whether the image, the text or the model caused the problem."),
    ("Which image formats are accepted?",
     "The image applications accept JPEG and PNG files. Other formats are refused with an unsupported media type "
     "error that lists the accepted ones."),
    ("How is an image prepared for the model?",
     "The image is decoded, converted to RGB, resized so that its shorter side fits the model, cropped in the "
     "centre and normalised with the ImageNet mean and standard deviation."),
    ("How is text prepared for the model?",
     "The text is split into tokens by a trained tokenizer, cut or padded to one hundred and twenty eight tokens, "
     "and sent with a mask that marks the real tokens."),
    ("Where do the notifications go?",
     "If a webhook address is configured, the notification is posted there as JSON. It is always written as a "
     "result object in the results bucket, under the application name and the call id."),
    ("What happens if the webhook is down?",
     "The failure is reported in the answer, and the result object is still written. A broken webhook never makes "
     "the application fail."),
    ("How do I remove a function?",
     "Send a delete request to the system functions endpoint with the function name, or remove it with the command "
     "line. Its warm workers are stopped."),
    ("Can functions scale to zero?",
     "Yes. Set the scale zero label to true and choose how long an idle function waits before its last instance "
     "stops. The next call then pays a cold start."),
    ("What does the status command show?",
     "It lists the nodes with their health, the deployed functions and how many replicas each one has. Use the json "
     "option when a script reads the output."),
    ("Is authentication required?",
     "Only when the cluster file sets access keys. Then every S3 request must be signed, and the workers sign their "
     "own requests with the same keys."),
]

SITE: list[str] = [
    "Welcome to our online store.",
    "Free shipping on all orders over fifty euros.",
    "Your order has been received and will be shipped within two working days.",
    "Sign up for our newsletter and get ten percent off your first purchase.",
    "Add this item to your basket.",
    "This product is out of stock at the moment.",
    "We will send you an email as soon as it is available again.",
    "Please enter a valid email address.",
    "Your password must contain at least eight characters.",
    "Forgot your password? We can send you a link to reset it.",
    "Returns are free within thirty days of delivery.",
    "Keep the original packaging until you are sure you want to keep the item.",
    "Our customer service team is available from Monday to Friday, nine to five.",
    "You can track your parcel with the number in your confirmation email.",
    "Delivery times may be longer during the holiday season.",
    "All prices include value added tax.",
    "Payment is possible by card, bank transfer or invoice.",
    "Thank you for your order!",
    "The item you are looking for could not be found.",
    "Check the spelling of your search or try a more general word.",
    "Customers who bought this item also bought these products.",
    "Read the reviews written by other customers.",
    "Write a review and tell us what you think.",
    "This jacket is made from recycled materials.",
    "Machine washable at thirty degrees.",
    "The shoes are true to size, so order your usual size.",
    "Choose a colour and a size before you add the item to your basket.",
    "Gift wrapping is available for a small fee.",
    "Your basket is empty.",
    "Continue shopping or go to checkout.",
    "We use cookies to improve your experience on our website.",
    "You can change your cookie settings at any time.",
    "By continuing to browse, you accept our privacy policy.",
    "Our privacy policy explains which data we collect and why.",
    "We never sell your personal data to third parties.",
    "Create an account to save your addresses and follow your orders.",
    "Log in to your account.",
    "Log out.",
    "Change your delivery address.",
    "Your changes have been saved.",
    "Something went wrong. Please try again later.",
    "The page you requested does not exist.",
    "Go back to the home page.",
    "Book your stay directly with us for the best price.",
    "Breakfast is served every morning from seven until ten.",
    "Check in from three in the afternoon, check out until eleven in the morning.",
    "The hotel is a ten minute walk from the main railway station.",
    "Pets are welcome in selected rooms.",
    "Free wireless internet is available throughout the building.",
    "Cancel free of charge up to two days before arrival.",
    "The museum is open every day except Monday.",
    "Tickets can be bought online or at the entrance.",
    "Children under twelve enter for free.",
    "Guided tours in several languages start every hour.",
    "The garden is closed during bad weather.",
    "Our restaurant serves seasonal dishes made from local produce.",
    "Please tell us about any allergies when you book a table.",
    "Reservations are recommended on weekends.",
    "The train leaves from platform four.",
    "The next bus to the airport departs in fifteen minutes.",
    "Please keep your ticket until the end of your journey.",
    "Our offices will be closed on public holidays.",
    "Download our app to receive offers and order updates.",
    "Update your browser to use all the features of this site.",
    "This video is not available in your country.",
    "Subscribe to our channel for new videos every week.",
    "Share this article with your friends.",
    "Leave a comment below.",
    "Comments are checked before they are published.",
    "Please be respectful to other readers.",
    "Contact us if you have any questions about your order.",
    "Fill in the form and we will get back to you within one working day.",
    "Your message has been sent.",
    "We are hiring! See our open positions.",
    "Join a friendly team that builds tools for thousands of customers.",
    "Send us your application with a short letter and your curriculum vitae.",
    "About us: we started as a small family business in nineteen ninety.",
    "Today we deliver to more than twenty countries.",
    "We plant a tree for every order placed this month.",
    "Our products are tested by independent laboratories.",
    "Instructions for use are included in the box.",
    "Read the safety information before using the device.",
    "Do not leave the charger connected when the battery is full.",
    "The warranty covers defects for two years from the date of purchase.",
    "Register your product to extend the warranty by one year.",
    "Spare parts can be ordered from our service centre.",
    "Frequently asked questions.",
    "How long does delivery take?",
    "Can I change my order after it has been placed?",
    "What should I do if my parcel arrives damaged?",
    "Take a photograph of the damage and contact us within seven days.",
    "Where can I find my invoice?",
    "Invoices are available in your account under past orders.",
    "Do you deliver on Saturdays?",
    "Express delivery is available in most large cities.",
    "The winter sale starts next Monday.",
    "Up to half price on selected items while stocks last.",
    "This offer cannot be combined with other discounts.",
    "Enter your discount code at checkout.",
    "The code you entered is not valid.",
    "Your discount has been applied.",
    "Compare the features of our three plans.",
    "Start your free trial today. No credit card required.",
    "Cancel your subscription at any time.",
    "Upgrade your plan to unlock more storage.",
    "Your trial ends in three days.",
    "Invite your colleagues to work on the same project.",
    "Your files are backed up every night.",
    "Two factor authentication protects your account.",
    "We have updated our terms of service.",
    "Please read and accept the new terms to continue.",
    "The weather forecast for tomorrow is sunny with light winds.",
    "Heavy rain is expected in the north this evening.",
    "The road to the harbour is closed for repairs until Friday.",
    "The library will host a reading for children on Saturday morning.",
    "Volunteers are needed to help clean the beach next weekend.",
    "The concert has been moved to the larger hall.",
    "Doors open one hour before the show.",
    "Parking is available behind the building.",
    "The swimming pool is heated all year round.",
    "Lessons for beginners take place on Tuesday and Thursday evenings.",
]

PROSE: list[str] = [
    "The morning was cold and clear, and the river moved slowly under a thin layer of mist.",
    "Along the bank a row of old willows leaned toward the water as if they were listening to it.",
    "A fisherman sat on a wooden crate, his line still, his coffee steaming beside him.",
    "Further along, the bridge carried the first trucks of the day toward the city.",
    "In the city the markets were opening, and the smell of bread filled the narrow streets.",
    "Shopkeepers pulled up their shutters and set out crates of apples, onions and pears.",
    "Children on their way to school stopped to look at a dog asleep in a patch of sun.",
    "By noon the mist had gone and the whole valley was bright and warm.",
    "Farmers in the fields below checked the young wheat and the level of the irrigation ditches.",
    "A light aircraft crossed the sky, photographing the land for a new map of the region.",
    "From above, the fields looked like a patchwork of green and yellow squares cut by straight grey roads.",
    "The engineers who read those photographs look for cracks in bridges and damage to power lines.",
    "A small crack in a concrete beam can grow for years before anyone notices it.",
    "Water enters the crack, freezes in winter and slowly pushes the concrete apart.",
    "Inspections used to mean climbing ladders; now cameras and drones do much of the work.",
    "On a building site, every worker must wear a hard hat, a bright vest and strong boots.",
    "Safety officers walk the site each morning to check that nobody has forgotten their gear.",
    "Most accidents happen at the end of a long shift, when people are tired and hurry.",
    "In the hospital, a radiologist studies a scan and marks the regions that need attention.",
    "A second opinion is often requested before a difficult treatment begins.",
    "Good tools do not replace the judgement of the doctor, but they help her see more quickly.",
    "A bank must decide whether a loan can be repaid before it lends the money.",
    "It looks at the income of the applicant, the amount requested and the history of past loans.",
    "A careful decision protects both the bank and the person who borrows.",
    "Online communities need rules, and someone has to apply them fairly and quickly.",
    "Every minute, thousands of pictures are uploaded, and only a few of them break the rules.",
    "People ask questions in their own words, and a good assistant answers in plain language.",
    "A translation should keep the meaning of the original, not only its words.",
    "Short texts on a website are hard to translate because they have so little context.",
    "A button that says open can mean a door, a shop or a file, depending on where it appears.",
    "Data is heavy: moving it across a network costs time, energy and money.",
    "It is often cheaper to send the program to the data than to send the data to the program.",
    "That simple idea has been rediscovered many times, in databases, in disks and in networks.",
    "The storage drives of a data centre already contain small processors that manage the flash memory.",
    "A slightly larger processor beside them could run useful work where the bytes already are.",
    "Serverless functions are small, short and stateless, which makes them easy to move.",
    "They start when a request arrives and stop when the work is done.",
    "Because they keep no state, any copy of a function can answer any request.",
    "The hard part is deciding where each request should run at the moment it arrives.",
    "A scheduler that knows where the data lives can make that decision well.",
    "In the evening the wind turned, and clouds gathered over the hills to the west.",
    "The fisherman packed his crate and walked home along the darkening path.",
    "Lights came on in the windows one by one, and somewhere a radio played an old song.",
    "The river went on moving in the dark, carrying the day's last leaves toward the sea.",
]


def training_lines() -> list[str]:
    """Every sentence of the corpus, one per line: what the tokenizers are trained on."""
    lines: list[str] = []
    for question, answer in FAQ:
        lines.append(question)
        lines.append(answer)
    lines.extend(SITE)
    lines.extend(PROSE)
    return lines


def passages() -> list[str]:
    """The chatbot's knowledge: one passage per FAQ entry (question and answer together)."""
    return [f"{q} {a}" for q, a in FAQ]
